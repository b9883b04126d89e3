"""Hydra's record of a command (`soft_spatial.infra.hydra_record`): the three files Hydra's
``output_subdir`` would hold, each loading back to what the command ran with."""

from __future__ import annotations

import yaml
from hydra import compose, initialize_config_dir
from hydra.core.hydra_config import HydraConfig
from omegaconf import OmegaConf, open_dict

from soft_spatial.infra.hydra_record import hydra_record


def test_the_record_holds_the_config_as_run_hydras_own_and_the_overrides(tmp_path):
    (tmp_path / "app.yaml").write_text("lr: 0.1\nmodel:\n  name: tiny\n  layers: 2\n")
    overrides = ["lr=0.5", "model.layers=3", "+seed=7"]
    with initialize_config_dir(config_dir=str(tmp_path), version_base=None, job_name="record_test"):
        full = compose(config_name="app", overrides=overrides, return_hydra_config=True)
    HydraConfig.instance().set_config(full)  # what a running Hydra app has
    try:
        cfg = full.copy()
        with open_dict(cfg):
            del cfg["hydra"]  # the task function's config holds no hydra node
        files = hydra_record(cfg, directory="rec")
    finally:
        HydraConfig.instance().cfg = None
    assert sorted(files) == ["rec/config.yaml", "rec/hydra.yaml", "rec/overrides.yaml"]
    assert yaml.safe_load(files["rec/config.yaml"]) == {"lr": 0.5, "model": {"name": "tiny", "layers": 3},
                                                        "seed": 7}
    assert yaml.safe_load(files["rec/overrides.yaml"]) == overrides
    hydra = yaml.safe_load(files["rec/hydra.yaml"])["hydra"]
    assert hydra["job"]["name"] == "record_test" and hydra["overrides"]["task"] == overrides
    assert hydra == OmegaConf.to_container(full.hydra)
