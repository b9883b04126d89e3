"""python -m soft_spatial.export: one directory per trained model, picked up by evaluation; and
the training metrics reaching a real tracker (TensorBoard)."""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hydra import compose, initialize_config_dir

from soft_spatial.eval.__main__ import CONFIG_DIR, build_config
from soft_spatial.export import CONTROLLER_FILE, SETTINGS_FILE, actor_dir, apply_exported
from soft_spatial.softthink import AdaptSoft

ROOT = Path(__file__).resolve().parents[1]


def _fake_export(tmp_path: Path, mode: str = "adaptsoft") -> Path:
    out = tmp_path / "exported"
    out.mkdir()
    (out / SETTINGS_FILE).write_text(yaml.safe_dump(
        {"soft_thinking": {"mode": mode, "top_k": 3, "noise_scale": 0.5, "fixed_tau": 0.4},
         "adaptsoft": {"tau0": 0.5}}))
    AdaptSoft(hidden_size=8, width=4).save(out / CONTROLLER_FILE)
    (out / "config.json").write_text("{}")  # evaluation checks model.path is a model directory
    return out


def _compose(overrides):
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
        return compose(config_name="eval", overrides=overrides)


def test_exported_settings_apply_and_the_command_line_wins(tmp_path):
    out = _fake_export(tmp_path)
    cfg = _compose([f"model.path={out}"])
    taken = apply_exported(cfg, [f"model.path={out}"])
    assert set(taken) == {"soft_thinking.mode", "soft_thinking.top_k", "soft_thinking.noise_scale",
                          "soft_thinking.fixed_tau", "mode", "controller"}
    ecfg = build_config(cfg)
    st = ecfg.soft_thinking
    assert (st.mode, st.top_k, st.noise_scale, st.fixed_tau) == ("adaptsoft", 3, 0.5, 0.4)
    assert ecfg.controller == str(out / CONTROLLER_FILE)

    given = [f"model.path={out}", "mode=fixed", "soft_thinking.top_k=7"]
    cfg = _compose(given)
    apply_exported(cfg, given)
    ecfg = build_config(cfg)
    st = ecfg.soft_thinking
    assert (st.mode, st.top_k, st.noise_scale) == ("fixed", 7, 0.5)
    assert ecfg.controller is None  # no controller outside adaptsoft mode

    elsewhere = tmp_path / "elsewhere.pt"
    AdaptSoft(hidden_size=8, width=4).save(elsewhere)
    given = [f"model.path={out}", f"controller={elsewhere}"]
    cfg = _compose(given)
    apply_exported(cfg, given)
    assert build_config(cfg).controller == str(elsewhere)


def test_a_plain_model_directory_changes_nothing(tmp_path):
    cfg = _compose([f"model.path={tmp_path}"])
    before = dict(cfg.soft_thinking)
    assert apply_exported(cfg, []) == [] and dict(cfg.soft_thinking) == before


def test_actor_dir_names_what_is_missing(tmp_path):
    with pytest.raises(FileNotFoundError, match="no FSDP actor checkpoint"):
        actor_dir(tmp_path)


@pytest.mark.slow
def test_train_export_evaluate_and_tensorboard(tiny_qwen3_vl_small, tmp_path, monkeypatch):
    """One real training step (verl on the CPU, AdaptSoft, TensorBoard logger), exported with
    verl's merger, evaluated from the export alone; the soft/* and actor/adaptsoft/* scalars are
    read back from the TensorBoard event file."""
    from test_train_cpu import assert_one_step, prepare_train_data, run_train

    data = prepare_train_data(tmp_path / "data", tiny_qwen3_vl_small)
    monkeypatch.setenv("TENSORBOARD_DIR", str(tmp_path / "tb"))
    (metrics,) = run_train(tiny_qwen3_vl_small, data, tmp_path, "experiment=adaptsoft",
                           "trainer.total_training_steps=1", "trainer.save_freq=1",
                           "trainer.n_gpus_per_node=1", "trainer.logger=[console,file,tensorboard]",
                           "trainer.test_freq=1", "trainer.log_val_generations=2",
                           "actor_rollout_ref.rollout.val_kwargs.n=1")
    assert_one_step(metrics, "adaptsoft")

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(tmp_path / "tb"))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    assert {t for t in tags if t.startswith("soft/")} and {t for t in tags if t.startswith("actor/adaptsoft/")}
    for tag in ("soft/spine_match_rate", "actor/adaptsoft/grad_norm"):
        (event,) = events.Scalars(tag)
        assert event.step == 1 and event.value == pytest.approx(metrics[tag], rel=1e-6)

    # validation generations, as a text table, each with its τ per soft step
    (tag,) = [t for t in events.Tags()["tensors"] if t.startswith("val/generations")]
    text = events.Tensors(tag)[-1].tensor_proto.string_val[0].decode()
    notes = re.findall(r"\[(\d+) soft steps; tau per soft step:([ 0-9.]*)\]", text)
    assert len(notes) == 2
    tau0, delta = 0.5, 0.4  # configs/soft_thinking/paper.yaml: τ in (τ0 - Δ, τ0 + Δ)
    for count, values in notes:
        taus = [float(v) for v in values.split()]
        assert len(taus) == int(count) > 0 and all(tau0 - delta < t < tau0 + delta for t in taus)

    out = tmp_path / "export"
    res = subprocess.run([sys.executable, "-m", "soft_spatial.export", str(tmp_path / "ckpt"), str(out)],
                         capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert (out / "config.json").is_file() and any(out.glob("*.safetensors"))
    assert yaml.safe_load((out / SETTINGS_FILE).read_text())["soft_thinking"]["mode"] == "adaptsoft"
    trained = tmp_path / "ckpt" / "global_step_1" / "actor" / CONTROLLER_FILE
    assert (out / CONTROLLER_FILE).read_bytes() == trained.read_bytes()
    assert not (tmp_path / "export.partial").exists()

    evaluated = tmp_path / "eval"
    res = subprocess.run(
        [sys.executable, "-m", "soft_spatial.eval", f"model.path={out}", "benchmarks=[omnispatial]",
         f"data.omnispatial={data / 'fixtures' / 'omnispatial'}", "samples=1", "max_new_tokens=8", "limit=2",
         f"output_dir={evaluated}"],
        capture_output=True, text=True, timeout=600, cwd=ROOT, env=dict(os.environ, HF_HUB_OFFLINE="1"))
    assert res.returncode == 0, res.stderr[-3000:]
    config = json.loads((evaluated / "summary.json").read_text())["config"]
    assert config["mode"] == "adaptsoft" and config["controller"] == str(out / CONTROLLER_FILE)
    assert config["model"] == str(out)
