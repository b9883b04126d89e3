"""The GPU kit's stage e, its CPU-side parts: the controller fingerprint (what the trainer sends
and the SGLang plugin installs are compared by it), its log, the wire round trip into the
scheduler's runtime, the sync check's verdicts and the one-GPU cluster preset. The E jobs' end
to end dry run is tests/sglang_real/test_gpu_headline_dry_run.py."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from soft_spatial.softthink import AdaptSoft
from soft_spatial.softthink.controller import (FINGERPRINT_LOG_ENV, log_fingerprint,
                                               state_fingerprint)

from soft_spatial_bench.gpu import grpo as stage_e

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
    assert state_fingerprint(ctrl.to_state().weights) == state_fingerprint(sd)
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
    fp = log_fingerprint("trainer", ctrl.to_state().weights, step=3)
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
    assert state_fingerprint(rt.controller.state_dict()) == state_fingerprint(state.weights)
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
    cmd = stage_e.train_command(stage_e.ESpec(), Path("m"), Path("d"), Path("c"), 2, False,
                                dry=False)
    assert "cluster=gpu1" in cmd and "trainer.save_freq=-1" in cmd and "rollout=sglang" in cmd
    assert f"reward.custom_reward_function.path={stage_e.smoke_reward_path()}" in cmd


def _compose(spec: "stage_e.ESpec"):
    """The training command's overrides of ``spec`` composed as training composes them."""
    from train_helpers import compose_train
    cmd = stage_e.train_command(spec, Path("m"), Path("d"), Path("c"), spec.steps, False,
                                dry=False)
    return compose_train(*[a for a in cmd[3:] if not a.startswith(("model.path", "data.",
                                                                   "reward.", "trainer."))])


def test_fp32_runs_sglang_the_actor_and_the_reference_in_fp32():
    """E/fp32: SGLang's dtype, and FSDP2's mixed precision in fp32 for actor and reference, where
    verl 0.9.1 skips autocast (FSDPEngine.forward_step: autocast only when param_dtype is not
    fp32) and builds the module in model_dtype fp32."""
    cfg = _compose(stage_e.ESpec(dtype="float32", weights="parity", steps=1))
    a = cfg.actor_rollout_ref
    assert a.rollout.dtype == "float32"
    for role in (a.actor, a.ref):
        mp = role.fsdp_config.mixed_precision
        assert (mp.param_dtype, mp.reduce_dtype, mp.buffer_dtype) == ("fp32", "fp32", "fp32")
        assert role.fsdp_config.model_dtype == "fp32"
    bf16 = _compose(stage_e.ESpec(dtype="bfloat16")).actor_rollout_ref
    assert bf16.rollout.dtype == "bfloat16" and bf16.actor.fsdp_config.get("mixed_precision") is None


def test_verl_skips_autocast_exactly_when_param_dtype_is_fp32():
    """The verl 0.9.1 lines E/fp32 relies on, read from its source."""
    import inspect

    from verl.workers.engine.fsdp.transformer_impl import FSDPEngine, FSDPEngineWithLMHead
    src = inspect.getsource(FSDPEngineWithLMHead.forward_step)  # the soft engine's base
    assert "autocast_dtype == torch.float32" in src and "nullcontext()" in src
    assert "self._autocast_dtype = param_dtype" in inspect.getsource(FSDPEngine._build_fsdp_module)


def test_stock_hard_is_verls_own_rollout_actor_and_loss():
    cfg = _compose(stage_e.ESpec(experiment="hard", stock=True, weights="parity"))
    a = cfg.actor_rollout_ref
    assert cfg.soft_thinking.mode == "hard"
    assert a.rollout.name == "sglang" and a.model.model_type == "language_model"
    assert a.actor.policy_loss.loss_mode == "vanilla"
    assert a.rollout.agent.default_agent_loop == "single_turn_agent"
    kwargs = a.rollout.engine_kwargs.sglang
    assert kwargs.sampling_backend == "pytorch" and "custom_weight_loader" not in kwargs
    with pytest.raises(ValueError, match="stock verl trains hard only"):
        stage_e.ESpec(stock=True)
    # the CPU dry run keeps the soft engine (verl's own pins memory, CUDA only), the rest stock
    dry = stage_e.train_command(stage_e.ESpec(experiment="hard", stock=True), Path("m"),
                                Path("d"), Path("c"), 2, False, dry=True)
    assert "actor_rollout_ref.rollout.name=sglang" in dry
    assert not any(a.startswith(stage_e.STOCK_ENGINE) for a in dry)


def test_hard_e_is_the_plugins_pipeline_in_hard_mode_judged_without_a_controller():
    """E/hard (loan 3; the suite trains the hard preset in tests/e2e/test_multinode_train.py, and
    E/fp32's job runs whole in the headline dry run): the plan's spec trains through the plugin's
    SGLang rollout, engine, loss and agent loop in hard mode, two steps; its metrics are judged
    without soft steps or a controller (a soft check would fail every hard run), and its verdict
    reads the splits a hard run records."""
    from soft_spatial_bench.gpu.jobs import plan
    (job,) = [j for j in plan() if j.key == "E/hard"]
    spec = stage_e.ESpec.from_args(job.args)
    assert (spec.experiment, spec.steps, spec.stock, spec.adaptsoft) == ("hard", 2, False, False)
    cfg = _compose(spec)
    a = cfg.actor_rollout_ref
    assert cfg.soft_thinking.mode == "hard" and a.rollout.name == "sglang_soft"
    assert a.model.model_type == "soft_language_model" and a.actor.policy_loss.loss_mode == "soft_grpo"
    assert a.rollout.agent.default_agent_loop == "soft_thinking_agent"
    hard, step0, kl = "soft/replay_max_abs_diff_hard", "soft/replay_max_abs_diff_step0", stage_e.ROLLOUT_KL
    metrics = {s: {"actor/grad_norm": 0.5, hard: 1e-6, step0: 0.0, kl: 1e-6,
                   "soft/soft_step_fraction": 0.0} for s in (1, 2)}
    assert stage_e._problems(spec, metrics, dry=True) == []
    assert stage_e._problems(stage_e.ESpec(), metrics, dry=True)  # adaptsoft's: no soft steps
    v = stage_e.verdict(spec, metrics, dry=True)
    assert v["status"] == "pass" and "soft/replay_max_abs_diff_soft" in v["not_recorded"]
    assert stage_e.verdict(spec, {1: metrics[1], 2: {**metrics[2], hard: 2e-3}},
                           dry=True)["first_beyond"] == (hard, 2, 2e-3)


def test_extra_overrides_come_last_and_each_spec_differs_only_where_it_says():
    base = stage_e.ESpec(dtype="bfloat16", weights="parity")
    more = stage_e.ESpec.from_args({"dtype": "bfloat16", "weights": "parity",
                                    "overrides": ["x.y=1"]})
    a, b = (stage_e.train_command(s, Path("m"), Path("d"), Path("c"), 2, False, dry=False)
            for s in (base, more))
    assert b == a + ["x.y=1"]
    fp32 = stage_e.train_command(stage_e.ESpec(dtype="float32", weights="parity"), Path("m"),
                                 Path("d"), Path("c"), 2, False, dry=False)
    assert [x for x in fp32 if x not in a] == stage_e.FP32_OVERRIDES
    assert stage_e.ESpec(steps=2, resume=True).runs() == [(1, True, [0, 1]), (2, False, [1, 2])]
    assert stage_e.ESpec(steps=1).runs() == [(1, False, [0, 1])]


def test_parity_weights_are_fs_and_ds_init_untied():
    from soft_spatial.models.shapes import QWEN3_VL_2B, parity_init
    shape = stage_e.model_shape(stage_e.ESpec(weights="parity"), dry=False)
    want = parity_init(QWEN3_VL_2B["hidden_size"])
    assert (shape["init_std"], shape["head_init_std"]) == (want["init_std"], want["head_init_std"])
    assert shape["tie_word_embeddings"] is False and shape["num_hidden_layers"] == 4
    tiny = stage_e.model_shape(stage_e.ESpec(weights="tiny"), dry=False)
    assert "init_std" not in tiny and tiny["vision_config"]["depth"] == 4


def _metrics(**splits):
    return {1: {k: v for k, v in splits.items()}}


def test_the_verdict_reads_each_split_and_never_passes_a_missing_one():
    spec = stage_e.ESpec(dtype="float32")
    soft, hard, step0 = ("soft/replay_max_abs_diff_soft", "soft/replay_max_abs_diff_hard",
                         "soft/replay_max_abs_diff_step0")
    ok = stage_e.verdict(spec, {1: {soft: 3e-5, hard: 1e-6, step0: 0.0,
                                    "soft/replay_max_abs_diff": 3e-5}}, dry=False)
    assert ok["status"] == "pass" and ok["not_recorded"] == []
    bad = stage_e.verdict(spec, {1: {soft: 3e-5, hard: 2e-3}, 2: {soft: 17.0}}, dry=False)
    assert bad["status"] == "fail" and bad["first_beyond"] == (hard, 1, 2e-3)
    # before the engine's split metrics exist: the soft split decides, the others are named
    old = stage_e.verdict(spec, {1: {soft: 3e-5, "soft/replay_max_abs_diff": 3e-5}}, dry=False)
    assert old["status"] == "pass" and old["not_recorded"] == [hard, step0]
    none = stage_e.verdict(spec, {1: {"soft/replay_max_abs_diff": 3e-5}}, dry=False)
    assert none["status"].startswith("undecided") and soft in none["not_recorded"]
    bf16 = stage_e.verdict(stage_e.ESpec(), {1: {soft: 17.0}}, dry=False)
    assert bf16["status"].startswith("recorded") and bf16["first_beyond"] is None
    lines = "\n".join(stage_e._verdict_lines(old, None))
    assert "| soft/replay_max_abs_diff_hard | hard steps | not recorded |" in lines


def test_a_steps_price_is_adaptsoft_over_stock_hard_part_by_part():
    soft = {"values": {"timing": {"2": {"timing_s/gen": 4.0, "timing_s/update_actor": 3.0,
                                         stage_e.ALIGNMENT: 0.5}}}}
    hard = {"values": {"timing": {"2": {"timing_s/gen": 2.0, "timing_s/update_actor": 3.0}}}}
    rows = stage_e.step_price_rows({"E/bf16": soft, "E/hard": hard})
    by = {r[0]: r for r in rows}
    assert by["timing_s/gen (step 2)"][4] == 2.0 and by["timing_s/update_actor (step 2)"][4] == 1.0
    assert by[f"{stage_e.ALIGNMENT} (step 2)"][3:] == ["not recorded", "–"]
    assert stage_e.step_price_rows({"E/bf16": soft}) == []


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
