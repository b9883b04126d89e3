"""``python -m soft_spatial.stats entropy`` tells the truth about using what it wrote (issue 34,
item 18): the instruction it prints, taken literally, composes the estimate into training's and
evaluation's configuration, wherever ``--out`` put the file."""
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
PREFIX = ("use it (the first arguments of python -m soft_spatial.train or python -m soft_spatial.eval, "
          "before other overrides): ")


def _estimate(capsys, model, parquet, work, *extra) -> tuple[list[str], str]:
    """Run the command; the Hydra arguments it prints, and its whole output."""
    from soft_spatial.lab.paper.calibration.cli import main

    main(["entropy", "--prompts", "2", "--max-new-tokens", "6", "--work-dir", str(work),
          "--no-progress", *extra, "model=tiny", f"model.path={model}",
          f"data.train_files={parquet}", "actor_rollout_ref.rollout.temperature=1.0"])
    text = capsys.readouterr().out
    lines = [ln for ln in text.splitlines() if ln.startswith(PREFIX)]
    if not lines:  # the wording before issue 34: "config: X  (compose with entropy=NAME, or set ...)"
        return re.findall(r"compose with (entropy=[^\s,]+)", text), text
    (line,) = lines
    return shlex.split(line[len(PREFIX):]), text


def _compose(config_dir: Path, config_name: str, args: list[str], *overrides: str):
    """Hydra's compose API with ``args`` as given on the command line (``--config-dir D`` adds D
    to the search path, as Hydra's command line does)."""
    from hydra import compose, initialize_config_dir

    args = list(args)
    extra = []
    if "--config-dir" in args:
        i = args.index("--config-dir")
        extra = [f"file://{Path(args[i + 1]).resolve()}"]
        del args[i:i + 2]
    base = ["pkg://verl.trainer.config"] if config_name == "train" else []
    search = [f"hydra.searchpath=[{','.join(base + extra)}]"] if extra else []
    with initialize_config_dir(config_dir=str(config_dir), version_base=None):
        return compose(config_name=config_name, overrides=[*overrides, *args, *search])


def _cli_config(module: str, args: list[str], *overrides: str) -> dict:
    """The configuration the real command composes with ``args`` (Hydra's ``--cfg job``: printed,
    nothing run)."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONPATH=str(ROOT))
    res = subprocess.run([sys.executable, "-m", module, *args, *overrides, "--cfg", "job"],
                         capture_output=True, text=True, timeout=300, cwd=ROOT, env=env)
    assert res.returncode == 0, res.stderr[-3000:]
    return yaml.safe_load(res.stdout)


def test_the_printed_instruction_composes_an_out_file_in_an_entropy_directory(
        tiny_qwen3_vl_small, train_parquet, tmp_path, capsys):
    out = tmp_path / "conf" / "entropy" / "tinyx.yaml"
    args, _ = _estimate(capsys, tiny_qwen3_vl_small, train_parquet, tmp_path / "work",
                        "--out", str(out), "--name", "other")
    want = yaml.safe_load(out.read_text())["adaptsoft"]
    from soft_spatial.train import CONFIG_DIR

    cfg = _compose(CONFIG_DIR, "train", args, "model=tiny", "cluster=cpu")
    assert cfg.adaptsoft.entropy_mean == want["entropy_mean"] != 0.173
    assert cfg.adaptsoft.entropy_std == want["entropy_std"]
    cfg = _compose(CONFIG_DIR, "eval", args)
    assert cfg.adaptsoft.entropy_mean == want["entropy_mean"]
    # the commands themselves, with the printed arguments as they are
    for module, overrides in (("soft_spatial.train", ["model=tiny", "cluster=cpu"]),
                              ("soft_spatial.eval", [])):
        assert _cli_config(module, args, *overrides)["adaptsoft"]["entropy_mean"] == want["entropy_mean"]
    # the file itself says how to use it, the same way
    assert shlex.join(args) in out.read_text().split("\n# Compose:")[1].splitlines()[0]


def test_the_default_out_composes_by_name(tiny_qwen3_vl_small, train_parquet, tmp_path, capsys,
                                          monkeypatch):
    from soft_spatial.lab.paper.calibration import cli
    from soft_spatial.train import CONFIG_DIR

    configs = tmp_path / "configs"  # a copy: the command writes configs/entropy/<name>.yaml
    shutil.copytree(CONFIG_DIR, configs)
    monkeypatch.setattr(cli, "CONFIG_DIR", configs)
    args, _ = _estimate(capsys, tiny_qwen3_vl_small, train_parquet, tmp_path / "work",
                        "--name", "tinyz")
    assert args == ["entropy=tinyz"]
    want = yaml.safe_load((configs / "entropy" / "tinyz.yaml").read_text())["adaptsoft"]
    cfg = _compose(configs, "train", args, "model=tiny", "cluster=cpu")
    assert cfg.adaptsoft.entropy_mean == want["entropy_mean"] != 0.173


def test_an_out_file_hydra_cannot_find_gets_the_values_as_overrides(
        tiny_qwen3_vl_small, train_parquet, tmp_path, capsys):
    out = tmp_path / "elsewhere" / "mu.yaml"  # not in an entropy/ directory: no entropy= option
    args, text = _estimate(capsys, tiny_qwen3_vl_small, train_parquet, tmp_path / "work",
                           "--out", str(out))
    assert "entropy=" not in " ".join(args) and "compose with entropy" not in text
    want = yaml.safe_load(out.read_text())["adaptsoft"]
    from soft_spatial.train import CONFIG_DIR

    cfg = _compose(CONFIG_DIR, "train", args, "model=tiny", "cluster=cpu")
    assert (cfg.adaptsoft.entropy_mean, cfg.adaptsoft.entropy_std) == (
        want["entropy_mean"], want["entropy_std"])
