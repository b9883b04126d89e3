"""The GPU kit's stage e, its CPU-side parts: the controller fingerprint (what the trainer sends
and the SGLang plugin installs are compared by it), its log, the wire round trip into the
scheduler's runtime, the sync check's verdicts and the one-GPU cluster preset. The stage's
end-to-end dry run is tests/sglang_real/test_gpu_kit_stage_e.py."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from soft_spatial.softthink import AdaptSoft
from soft_spatial.softthink.controller import (FINGERPRINT_LOG_ENV, log_fingerprint,
                                               state_fingerprint)

from soft_spatial.lab.gpu import grpo as stage_e

ROOT = Path(__file__).resolve().parents[3]


def _reference(sd: dict) -> str:
    """The fingerprint's definition, written out independently with numpy (float64 values)."""
    h = hashlib.sha256()
    for name in sorted(sd):
        a = sd[name].double().numpy() if sd[name].is_floating_point() else sd[name].numpy()
        h.update(f"{name}:{tuple(a.shape)}:{'torch.float64' if a.dtype.kind == 'f' else sd[name].dtype};".encode())
        h.update(a.tobytes(order="C"))
    return h.hexdigest()


def test_fingerprint_is_the_sha256_of_names_shapes_and_values():
    ctrl = AdaptSoft(hidden_size=16, width=8, seed=3)
    sd = ctrl.state_dict()
    assert state_fingerprint(sd) == _reference(sd)
    assert state_fingerprint(dict(reversed(list(sd.items())))) == state_fingerprint(sd)  # order
    # the trainer's CPU copy, an fp64 copy and the rollout's module: the same values, one print
    assert state_fingerprint(ctrl.to_state()["state_dict"]) == state_fingerprint(sd)
    assert state_fingerprint(AdaptSoft(hidden_size=16, width=8, seed=3).double().state_dict()) \
        == state_fingerprint(sd)
    # the same bytes under another name or shape are another state
    name = next(k for k, v in sd.items() if v.dim() == 2)
    assert state_fingerprint({name + "x": sd[name]}) != state_fingerprint({name: sd[name]})
    assert state_fingerprint({name: sd[name].reshape(-1)}) != state_fingerprint({name: sd[name]})


@settings(max_examples=40, deadline=None)
@given(entry=st.integers(0, 100), index=st.integers(0, 10_000), bit=st.integers(0, 31))
def test_fingerprint_changes_with_any_bit_of_any_weight(entry, index, bit):
    sd = AdaptSoft(hidden_size=8, width=4, seed=1).state_dict()
    floats = [k for k, v in sd.items() if v.is_floating_point() and v.numel()]
    name = floats[entry % len(floats)]
    flipped = {k: v.clone() for k, v in sd.items()}
    bits = flipped[name].view(-1).view(torch.int32)
    bits[index % bits.numel()] ^= torch.tensor(1 << bit if bit < 31 else -(1 << 31),
                                               dtype=torch.int32)
    assert state_fingerprint(flipped) != state_fingerprint(sd)


def test_log_fingerprint_writes_only_when_asked(tmp_path, monkeypatch):
    ctrl = AdaptSoft(hidden_size=16, width=8)
    monkeypatch.delenv(FINGERPRINT_LOG_ENV, raising=False)
    assert log_fingerprint("trainer", ctrl) is None
    monkeypatch.setenv(FINGERPRINT_LOG_ENV, str(tmp_path / "log"))
    assert log_fingerprint("trainer", None) is None
    fp = log_fingerprint("trainer", ctrl.to_state()["state_dict"], step=3)
    assert log_fingerprint("rollout", ctrl) == fp == state_fingerprint(ctrl.state_dict())
    trainer, rollout = stage_e.read_sync_log(tmp_path / "log")
    assert [(r["side"], r["step"], r["sha256"]) for r in trainer] == [("trainer", 3, fp)]
    assert [r["sha256"] for rows in rollout.values() for r in rows] == [fp]


def test_controller_wire_round_trip_keeps_the_fingerprint():
    """What the worker sends (encode_controller, the uint8 weight) is what the scheduler's runtime
    holds after set_controller, bit for bit, trained weights included."""
    from soft_spatial.engines.sglang.client import decode_controller, encode_controller
    from soft_spatial.engines.sglang.runtime import SoftRuntime
    from soft_spatial.engines.sglang.server_args import SchedulerSetup
    from soft_spatial.softthink.settings import SoftSettings
    from soft_spatial.softthink import AdaptSoftConfig, SoftThinkingConfig

    sent = AdaptSoft(hidden_size=16)
    with torch.no_grad():
        for p in sent.parameters():
            p.add_(torch.randn_like(p))
    rt = SoftRuntime(SchedulerSetup(soft=SoftSettings(soft_thinking=SoftThinkingConfig(mode="adaptsoft"),
                                                      adaptsoft=AdaptSoftConfig()), hidden_size=16,
                                    think_end_id=7, banned_ids=[]))
    before = state_fingerprint(rt.controller.state_dict())
    state = sent.to_state()
    rt.set_controller(decode_controller(encode_controller(state)))
    assert state_fingerprint(rt.controller.state_dict()) == state_fingerprint(state["state_dict"])
    assert state_fingerprint(rt.controller.state_dict()) != before


def _rec(step, fp):
    return {"step": step, "sha256": fp * 64}


def test_sync_check_verdicts():
    good = [([_rec(0, "a"), _rec(1, "b")], {11: [_rec(None, "a"), _rec(None, "b")]}),
            ([_rec(1, "b"), _rec(2, "c")], {12: [_rec(None, "b"), _rec(None, "c")]})]
    steps = [[0, 1], [1, 2]]
    rows, problems = stage_e.check_sync(good, steps, {1: "b" * 64})
    assert problems == [] and [r[4] for r in rows] == ["yes"] * 4
    assert [r[5] for r in rows] == ["–", "yes", "yes", "–"]

    def bad(runs, ckpt=None):
        return stage_e.check_sync(runs, steps, ckpt or {1: "b" * 64})[1]

    wrong_install = [good[0], ([_rec(1, "b"), _rec(2, "c")], {12: [_rec(None, "b"), _rec(None, "x")]})]
    assert any("sync at step 2" in p and "installed" in p for p in bad(wrong_install))
    missing = [good[0], ([_rec(1, "b"), _rec(2, "c")], {12: [_rec(None, "b")]})]
    assert any("installed 1 controllers, the trainer sent 2" in p for p in bad(missing))
    assert any("no controller install" in p for p in bad([good[0], (good[1][0], {})]))
    resumed_other = [good[0], ([_rec(1, "z"), _rec(2, "c")], {12: [_rec(None, "z"), _rec(None, "c")]})]
    assert any("(resume)" in p for p in bad(resumed_other))
    assert any("checkpoint holds" in p for p in bad(good, {1: "q" * 64}))
    frozen = [([_rec(0, "a"), _rec(1, "a")], {11: [_rec(None, "a"), _rec(None, "a")]}), good[1]]
    assert any("did not change" in p for p in bad(frozen, {1: "a" * 64}))
    skipped = [([_rec(0, "a")], {11: [_rec(None, "a")]}), good[1]]
    assert any("steps [0], expected [0, 1]" in p for p in bad(skipped))


def test_timing_rows_name_verls_keys_in_step_order():
    m = {1: {"timing_s/step": 9.0, "timing_s/gen": 4.0, "timing_s/agent_loop/x": 1.0,
             "timing_s/update_weights": 2.0, "actor/adaptsoft/alignment_s": 3.14159e-5,
             "timing_s/other": 1.0, "timing_s/stop_profile": 0.0},
         2: {"timing_s/step": 8.0, "timing_s/gen": 3.0}}
    rows = stage_e.timing_rows(m)
    assert [r[0] for r in rows] == ["timing_s/gen", "timing_s/update_weights", "timing_s/step",
                                    "timing_s/other", "actor/adaptsoft/alignment_s"]
    assert rows[0][2:] == [4.0, 3.0] and rows[1][2:] == [2.0, "–"]
    assert rows[4][2:] == [3.142e-05, "–"]  # four significant digits, however small


def test_one_gpu_preset_colocates_sglang_with_memory_release():
    from train_helpers import compose_train
    cfg = compose_train("model=tiny", "cluster=gpu1", "rollout=sglang", "experiment=adaptsoft")
    r = cfg.actor_rollout_ref.rollout
    assert (cfg.trainer.nnodes, cfg.trainer.n_gpus_per_node, cfg.trainer.device) == (1, 1, "cuda")
    assert cfg.actor_rollout_ref.hybrid_engine and r.checkpoint_engine.backend == "naive"
    assert r.name == "sglang_soft" and r.free_cache_engine and r.engine_kwargs.sglang.enable_memory_saver
    assert cfg.actor_rollout_ref.actor.strategy == "fsdp2" and r.dtype == "bfloat16"
    assert cfg.trainer.save_freq == 1 and cfg.trainer.total_training_steps == 2
    cmd = stage_e.train_command(Path("m"), Path("d"), Path("c"), 2, False, dry=False)
    assert "cluster=gpu1" in cmd and "trainer.save_freq=-1" in cmd and "rollout=sglang" in cmd


def test_checkpoint_fingerprint_reads_the_training_checkpoint(tmp_path):
    from soft_spatial.actor.adaptsoft_trainer import AdaptSoftTrainer
    trainer = AdaptSoftTrainer(AdaptSoft(hidden_size=16))
    path = tmp_path / "global_step_1" / "actor" / "adaptsoft.pt"
    path.parent.mkdir(parents=True)
    trainer.save(path)
    want = state_fingerprint(trainer.controller.state_dict())
    assert stage_e.checkpoint_fingerprint(tmp_path, 1) == want
    assert stage_e.checkpoint_fingerprint(tmp_path, 2) is None
    json.dumps(want)  # a plain string: it goes into the report
