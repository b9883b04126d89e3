"""python -m soft_spatial.train on the CPU: presets, one step each, checkpoint and resume, export
and evaluation of the result, TensorBoard, the spine check. The slow tests run verl's real
trainer (Ray local, FSDP2/gloo workers, the local_soft rollout backend) on a tiny Qwen3-VL and
the OmniSpatial fixture."""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from soft_spatial.softthink import AdaptSoftConfig
from train_helpers import assert_one_step, compose_train, run_train

PRESETS = ["adaptsoft", "hard", "soft_fixed", "no_hidden", "no_entropy", "no_alignment",
           "no_centering"]
#: the presets with their own code path are each trained end to end once, checked with
#: assert_one_step: adaptsoft by the run-life test below (one rank), by its second run in
#: tests/e2e/test_train_signals.py (the signalled run, compared with the first) and on SGLang's
#: engine by the GPU kit's E/fp32 in the headline dry run (tests/sglang_real/test_gpu_headline_dry_run.py);
#: soft_fixed by the ablation row of tests/lab/paper/test_ablation.py (no controller: rollout,
#: checkpoint, export, evaluation); hard by tests/e2e/test_multinode_train.py (two ranks on two
#: nodes; two ranks' controllers stay equal in tests/actor/test_adaptsoft_trainer.py).
#: no_hidden, no_entropy, no_alignment and no_centering change
#: only the controller's inputs, its centring or its update, run through the real actor update in
#: tests/actor/test_adaptsoft_trainer.py (and compose into their settings below)
ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("preset", PRESETS)
def test_every_preset_composes_into_typed_settings(preset):
    from soft_spatial.softthink.settings import SoftSettings
    cfg = compose_train(f"experiment={preset}", "model=tiny", "cluster=cpu")
    s = SoftSettings.from_dict(cfg.actor_rollout_ref.rollout.custom)
    assert cfg.actor_rollout_ref.rollout.name == "local_soft"
    assert cfg.actor_rollout_ref.model.model_type == "soft_language_model"
    assert cfg.actor_rollout_ref.actor.policy_loss.loss_mode == "soft_grpo"
    want = {"hard": "hard", "soft_fixed": "fixed"}.get(preset, "adaptsoft")
    assert s.soft_thinking.mode == want
    assert s.adaptsoft.use_hidden == (preset != "no_hidden")
    assert s.adaptsoft.use_entropy == (preset != "no_entropy")
    assert s.alignment.enabled == (preset != "no_alignment")
    assert s.alignment.center == (preset != "no_centering")


def test_paper_configuration_values():
    cfg = compose_train("model=qwen3_vl_8b_thinking")
    a, r = cfg.actor_rollout_ref.actor, cfg.actor_rollout_ref.rollout
    assert (cfg.trainer.nnodes, cfg.trainer.n_gpus_per_node) == (2, 4)
    assert (cfg.data.train_batch_size, r.n, a.ppo_mini_batch_size,
            a.ppo_micro_batch_size_per_gpu) == (64, 8, 32, 4)
    assert (cfg.data.max_prompt_length, cfg.data.max_response_length) == (10240, 2048)
    assert (a.optim.lr, a.kl_loss_coef, a.kl_loss_type, a.clip_ratio) == (
        1e-6, 1e-3, "low_var_kl", 0.2)
    assert cfg.trainer.total_training_steps == 200 and a.strategy == "fsdp2"
    assert r.custom.soft_thinking.top_k == 5 and r.custom.adaptsoft.tau0 == 0.5


# -- real training runs (slow) -----------------------------------------------------------------
@pytest.mark.slow
def test_train_resume_export_and_evaluate(tiny_qwen3_vl_small, train_data, adaptsoft_run, monkeypatch):
    """The life of a run, one verl start-up per stage: 2 adaptsoft steps (TensorBoard, validation
    generations: the session's ``adaptsoft_run``, which the signalled run repeats and compares), killed after
    logging step 3, resumed (policy, controller, AdamW state and scaler restored), exported with
    verl's merger and evaluated from the export alone."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from soft_spatial.export import CONTROLLER_FILE, SETTINGS_FILE

    run, first = adaptsoft_run.out, adaptsoft_run.metrics
    train_steps = [m for m in first if "actor/grad_norm" in m]
    assert [m["step"] for m in train_steps] == [1, 2]
    for m in train_steps:
        assert_one_step(m, "adaptsoft")

    # the soft/* and actor/adaptsoft/* scalars reach TensorBoard, one event per step
    events = EventAccumulator(str(run / "tb"))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    assert {t for t in tags if t.startswith("soft/")} and {t for t in tags if t.startswith("actor/adaptsoft/")}
    for tag in ("soft/soft_step_fraction", "actor/adaptsoft/grad_norm"):
        got = {e.step: e.value for e in events.Scalars(tag)}
        assert got == pytest.approx({m["step"]: m[tag] for m in train_steps}, rel=1e-6)
    # validation generations, as a text table, each with its τ per soft step
    (tag,) = [t for t in events.Tags()["tensors"] if t.startswith("val/generations")]
    text = events.Tensors(tag)[-1].tensor_proto.string_val[0].decode()
    notes = re.findall(r"\[(\d+) soft steps; tau per soft step:([ 0-9.]*)\]", text)
    assert len(notes) == 2
    tau0, delta = AdaptSoftConfig.tau0, AdaptSoftConfig.delta  # τ in (τ0 - Δ, τ0 + Δ)
    for count, values in notes:
        taus = [float(v) for v in values.split()]
        assert len(taus) == int(count) > 0 and all(tau0 - delta < t < tau0 + delta for t in taus)

    ckpt = run / "ckpt" / "global_step_2" / "actor" / "adaptsoft.pt"
    saved = torch.load(ckpt, weights_only=False)
    assert saved["steps"] == 2 and saved["scaler"]["m"] is not None
    # as if the first run had been killed after logging step 3 but before saving it
    with open(run / "metrics.jsonl", "a") as f:
        f.write(json.dumps({"step": 3, "data": {"killed": 1}}) + "\n" + '{"step": 4, "da')
    monkeypatch.setenv("TENSORBOARD_DIR", str(run / "tb-resumed"))
    resumed = run_train(tiny_qwen3_vl_small, train_data, run, "experiment=adaptsoft",
                        "trainer.n_gpus_per_node=1",  # the world size the checkpoint was saved with
                        "reward.custom_reward_function.name=compute_score_deterministic",
                        "trainer.total_training_steps=3", "trainer.save_freq=3",
                        "trainer.resume_mode=auto")
    # the steps before the resume survive it (verl's file logger would truncate), the killed
    # run's steps after the checkpoint moved aside, step 3 logged once by the resumed run
    assert [m["step"] for m in resumed] == [m["step"] for m in first] + [3]
    assert resumed[:len(first)] == first and "killed" not in resumed[-1]
    superseded = (run / "metrics.superseded.jsonl").read_text().splitlines()
    assert json.loads(superseded[0])["data"] == {"killed": 1} and len(superseded) == 2
    last = resumed[-1]
    assert last["actor/adaptsoft/optimizer_steps"] == 3  # AdamW state continued
    after = torch.load(run / "ckpt" / "global_step_3" / "actor" / "adaptsoft.pt",
                       weights_only=False)
    assert after["steps"] == 3
    # the scaler's EMA continued from the saved value instead of restarting
    beta = saved["scaler"]["beta"]
    assert after["scaler"]["m"] != pytest.approx(last["actor/adaptsoft/alpha_rms"])
    assert after["scaler"]["updates"] > saved["scaler"]["updates"] and 0 < beta < 1

    # export the latest checkpoint (verl's merger) and evaluate from the export alone
    out = run / "export"
    res = subprocess.run([sys.executable, "-m", "soft_spatial.export", str(run / "ckpt"), str(out)],
                         capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert (out / "config.json").is_file() and any(out.glob("*.safetensors"))
    assert yaml.safe_load((out / SETTINGS_FILE).read_text())["soft_thinking"]["mode"] == "adaptsoft"
    trained = run / "ckpt" / "global_step_3" / "actor" / CONTROLLER_FILE
    assert (out / CONTROLLER_FILE).read_bytes() == trained.read_bytes()
    assert not (run / "export.partial").exists()
    evaluated = run / "eval"
    res = subprocess.run(
        [sys.executable, "-m", "soft_spatial.eval", f"model.path={out}", "benchmarks=[omnispatial]",
         f"data.omnispatial={train_data / 'fixtures' / 'omnispatial'}", "samples=1", "max_new_tokens=8",
         "limit=2", f"output_dir={evaluated}"],
        capture_output=True, text=True, timeout=600, cwd=ROOT, env=dict(os.environ, HF_HUB_OFFLINE="1"))
    assert res.returncode == 0, res.stderr[-3000:]
    config = json.loads((evaluated / "summary.json").read_text())["config"]
    assert config["mode"] == "adaptsoft" and config["controller"] == str(out / CONTROLLER_FILE)
    assert config["model"] == str(out)
