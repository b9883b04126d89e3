"""``python -m soft_spatial.stats entropy`` (soft_spatial/lab/paper/calibration/cli.py): the config
file it writes holds the estimate of the entropies it kept, training composes it from a config dir
on the search path, an existing estimate is kept unless ``--force``, a forced rerun resumes from the
work dir and one under other settings is refused, a missing parquet is named; ``--help``. (That
the printed instruction composes, taken literally: tests/e2e/test_stats_entropy_usage.py.)"""
import numpy as np
import pytest


def test_cli_writes_a_config_that_training_composes_and_resumes(tiny_qwen3_vl_small,
                                                                train_parquet, tmp_path, capsys):
    import yaml
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from soft_spatial.lab.paper.calibration.cli import main
    from soft_spatial.lab.paper.calibration.entropy import read_partial
    from soft_spatial.train import CONFIG_DIR

    out = tmp_path / "conf" / "entropy" / "tinyx.yaml"
    args = ["entropy", "--prompts", "2", "--max-new-tokens", "6", "--out", str(out),
            "--work-dir", str(tmp_path / "work"), "--no-progress", "--name", "tinyx",
            "model=tiny", f"model.path={tiny_qwen3_vl_small}",
            f"data.train_files={train_parquet}", "actor_rollout_ref.rollout.temperature=1.0"]
    main(args)
    text = out.read_text()
    assert text.startswith("# @package _global_")
    conf = yaml.safe_load(text)
    parts = read_partial(tmp_path / "work" / "entropies.jsonl")
    values = np.concatenate([parts[i] for i in sorted(parts)])
    assert conf["adaptsoft"]["entropy_mean"] == pytest.approx(values.mean(), abs=1e-6)
    assert conf["adaptsoft"]["entropy_std"] == pytest.approx(values.std(), abs=1e-6)
    s = conf["entropy_estimate"]["settings"]
    assert (s["top_k"], s["temperature"], s["tau"], s["noise_scale"]) == (5, 1.0, 0.5, 1.0)
    assert (tmp_path / "work" / "histogram.png").stat().st_size > 1000
    # the file is outside configs/entropy/: the printed way names its config dir
    # (the instruction composed as printed: tests/e2e/test_stats_entropy_usage.py)
    assert f"--config-dir {tmp_path / 'conf'} entropy=tinyx" in capsys.readouterr().out
    # training composes it (entropy=<name> from a config dir on the search path)
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
        cfg = compose(config_name="train", overrides=[
            "model=tiny", "cluster=cpu", "entropy=tinyx",
            f"hydra.searchpath=[pkg://verl.trainer.config,file://{tmp_path / 'conf'}]"])
    custom = OmegaConf.to_container(cfg.actor_rollout_ref.rollout.custom, resolve=True)
    assert custom["adaptsoft"]["entropy_mean"] == conf["adaptsoft"]["entropy_mean"] != 0.173
    # an existing estimate is kept unless --force; a forced rerun resumes from the work dir
    with pytest.raises(SystemExit, match="--force"):
        main(args)
    main(args + ["--force"])
    assert "(2 done earlier)" in capsys.readouterr().out
    assert yaml.safe_load(out.read_text())["adaptsoft"] == conf["adaptsoft"]
    with pytest.raises(SystemExit, match="other settings"):
        main(args[:-1] + ["actor_rollout_ref.rollout.temperature=0.7", "--force"])
    with pytest.raises(FileNotFoundError, match="missing.parquet"):
        main(["entropy", "--out", str(tmp_path / "z.yaml"), "--work-dir", str(tmp_path / "w2"),
              "model=tiny", f"model.path={tiny_qwen3_vl_small}",
              f"data.train_files={tmp_path / 'missing.parquet'}"])


def test_help(capsys):
    from soft_spatial.lab.paper.calibration.cli import main

    with pytest.raises(SystemExit) as e:
        main(["entropy", "--help"])
    assert e.value.code == 0 and "--prompts" in capsys.readouterr().out
