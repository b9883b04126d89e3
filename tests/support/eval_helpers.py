"""The evaluation config of the tests: the fixture benchmarks, a model, an output directory."""
from hydra import compose, initialize_config_dir

from soft_spatial.eval.__main__ import CONFIG_DIR, build_config


def make_cfg(fixtures, model, out, **over):
    overrides = [f"data.omnispatial={fixtures.omnispatial}", f"data.mindcube={fixtures.mindcube}",
                 f"data.spatialab={fixtures.spatialab / 'spatialab.parquet'}",
                 f"model.path={model}", f"output_dir={out}", "mode=fixed", "samples=2",
                 "max_new_tokens=12"] + [f"{k}={v}" for k, v in over.items()]
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
        return build_config(compose(config_name="eval", overrides=overrides))
