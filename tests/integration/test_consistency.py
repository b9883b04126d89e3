"""Rollout/training consistency (soft_spatial.integration.consistency): the replay metrics against
a hand computation, the run's bound applied (warn or stop, each naming the step, the metric, its
value and the setting), and verl's rollout correction refused while soft thinking is on — through
the training entry point's preflight, before Ray starts."""
from __future__ import annotations

import math

import pytest
import torch
from hydra import compose, initialize_config_dir

from soft_spatial.integration.consistency import (REPLAY_METRICS, ReplayMismatch, check_replay,
                                                  check_rollout_correction, replay_dtype,
                                                  replay_metrics)
from soft_spatial.softthink import DensityConfig, ReplayCheckConfig
from soft_spatial.train import CONFIG_DIR, preflight


def test_replay_metrics_are_the_max_differences_over_response_and_soft_steps():
    g = torch.Generator().manual_seed(0)
    roll, old = torch.randn(3, 5, generator=g), torch.randn(3, 5, generator=g)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]])
    soft = torch.tensor([[1, 0, 1, 1, 1], [0, 0, 1, 0, 0], [0, 0, 0, 0, 0]])
    roll[0, 4] = 1e6  # outside the response: never counted
    got = replay_metrics(roll, old, mask, soft)
    pairs = [(i, j) for i in range(3) for j in range(5) if mask[i, j]]

    def most(keep):
        return max(abs(float(roll[i, j]) - float(old[i, j])) for i, j in pairs if keep(i, j))

    assert got == pytest.approx({"soft/replay_max_abs_diff": most(lambda i, j: True),
                                 "soft/replay_max_abs_diff_soft": most(lambda i, j: soft[i, j]),
                                 "soft/replay_max_abs_diff_hard": most(lambda i, j: not soft[i, j]),
                                 "soft/replay_max_abs_diff_step0": most(lambda i, j: j == 0)},
                                rel=1e-6)
    assert "soft/replay_max_abs_diff_soft" not in replay_metrics(roll, old, mask, soft * 0)
    assert "soft/replay_max_abs_diff_hard" not in replay_metrics(roll, old, mask, mask)
    assert replay_metrics(roll, old, mask * 0, soft) == {}


def test_each_part_reports_the_difference_set_in_it():
    """One difference set per part, the others 0: each metric reports its own steps' value —
    a discrete step's, a soft step's, and the first step's (its input is the prompt alone), here
    in a response that starts after left padding."""
    roll = torch.zeros(2, 6)
    mask = torch.tensor([[0, 0, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0]])
    soft = torch.tensor([[0, 0, 0, 1, 1, 0], [1, 1, 1, 0, 0, 0]])
    old = torch.zeros(2, 6)
    old[0, 5], old[0, 3], old[1, 1] = 0.25, -3.0, 17.0  # hard, soft, soft
    old[0, 2] = 0.5  # step 0 of row 0 (hard); row 1's step 0 (soft) agrees
    old[1, 4] = 99.0  # outside the response
    assert replay_metrics(roll, old, mask, soft) == {
        "soft/replay_max_abs_diff": 17.0, "soft/replay_max_abs_diff_soft": 17.0,
        "soft/replay_max_abs_diff_hard": 0.5, "soft/replay_max_abs_diff_step0": 0.5}
    old[1, 0] = -40.0  # a prompt mismatch shows at step 0 (and in the soft steps it is one of)
    got = replay_metrics(roll, old, mask, soft)
    assert got["soft/replay_max_abs_diff_step0"] == 40.0
    assert got["soft/replay_max_abs_diff_soft"] == 40.0 and got["soft/replay_max_abs_diff_hard"] == 0.5
    assert set(REPLAY_METRICS.values()) == set(got)


def test_within_the_bound_nothing_is_said(capsys):
    m = {"soft/replay_max_abs_diff": 2e-4, "soft/replay_max_abs_diff_soft": 1e-4}
    assert check_replay(m, ReplayCheckConfig(bound=1e-3), step=4, dtype="bfloat16") == 0.0
    assert check_replay(m, ReplayCheckConfig(), step=4, dtype="float32") == 0.0
    assert check_replay({}, ReplayCheckConfig(bound=1e-3), step=4, dtype="float32") == 0.0
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("value", [17.02, math.nan, math.inf])
def test_over_the_bound_warns_loudly_or_stops(capsys, value):
    m = {"soft/replay_max_abs_diff": 0.5, "soft/replay_max_abs_diff_soft": value}
    assert check_replay(m, ReplayCheckConfig(bound=1.0), step=7, dtype="bfloat16") == 1.0
    err = capsys.readouterr().err
    assert err.startswith("WARNING soft_spatial: step 7: soft/replay_max_abs_diff_soft = ")
    assert "bound 1 (actor_rollout_ref.rollout.custom.replay_check.bound)" in err
    assert "on_exceed=warn" in err
    with pytest.raises(ReplayMismatch, match=r"step 7: soft/replay_max_abs_diff_soft .*"
                       r"on_exceed=stop.*resumes from its last checkpoint"):
        check_replay(m, ReplayCheckConfig(bound=1.0, on_exceed="stop"), step=7, dtype="float32")


def test_the_bound_is_the_compute_dtypes():
    """Without an explicit bound the fp32 runs' bound applies when both sides compute in fp32, the
    bf16 one otherwise (fp16 included); the warning names the setting that applied."""
    c = ReplayCheckConfig()
    assert c.bound_for("float32") == c.fp32_bound == 1e-3
    assert c.bound_for("bfloat16") == c.bound_for("float16") == c.bf16_bound > 100 * c.fp32_bound
    assert ReplayCheckConfig(bound=0.5).bound_for("float32") == 0.5
    with pytest.raises(ValueError, match="dtype must be one of"):
        c.bound_for("fp8")
    m = {"soft/replay_max_abs_diff_hard": 0.01}
    assert check_replay(m, c, step=1, dtype="bfloat16") == 0.0
    with pytest.raises(ReplayMismatch, match=r"exceeds the bound 0.001 \(actor_rollout_ref\.rollout"
                       r"\.custom\.replay_check\.fp32_bound, the float32 runs' bound\)"):
        check_replay(m, ReplayCheckConfig(on_exceed="stop"), step=1, dtype="float32")


def test_the_compute_dtype_is_read_from_verls_config():
    """cluster=cpu computes in fp32 on both sides, cluster=gpu1 in bf16; one side in bf16 is
    enough for the bf16 bound; verl's defaults are bf16; an unknown name is an error naming the
    setting."""
    from omegaconf import OmegaConf
    assert replay_dtype(_compose()) == "float32"  # the tests' cluster=cpu
    assert replay_dtype(_compose(cluster="gpu1")) == "bfloat16"

    def cfg(rollout, actor):
        mixed = {} if actor is None else {"mixed_precision": {"param_dtype": actor}}
        return OmegaConf.create({"actor_rollout_ref": {"rollout": {"dtype": rollout},
                                                       "actor": {"fsdp_config": mixed}}})

    for rollout, actor, want in (("float32", "bf16", "bfloat16"), ("bfloat16", "fp32", "bfloat16"),
                                 ("float16", "fp32", "float16"), (None, None, "bfloat16"),
                                 ("float32", "fp32", "float32")):
        assert replay_dtype(cfg(rollout, actor)) == want, (rollout, actor)
    with pytest.raises(ValueError, match=r"actor_rollout_ref\.rollout\.dtype='fp8'"):
        replay_dtype(cfg("fp8", None))


def test_the_setting_is_checked_and_named():
    with pytest.raises(ValueError, match="on_exceed"):
        ReplayCheckConfig(on_exceed="ignore")
    for name in ("bound", "fp32_bound", "bf16_bound"):
        with pytest.raises(ValueError, match=name):
            ReplayCheckConfig(**{name: 0.0})


# -- the bf16 bound against bf16 rounding and real mismatches ------------------------------------
def _metrics(eng, prompts, outs, density=None):
    """replay_metrics of LocalEngine rollouts against their teacher-forced replay ([B, R], as the
    trainer lays them out)."""
    from soft_spatial.engines.replay import replay_completion
    r = max(len(o.token_ids) for o in outs)
    roll, old, mask, soft = (torch.zeros(len(outs), r) for _ in range(4))
    for i, o in enumerate(outs):
        n = len(o.token_ids)
        rep = replay_completion(eng, prompts[o.prompt_index], o, density=density)
        roll[i, :n], old[i, :n] = torch.tensor(o.logprobs), rep["loglik"].float()
        mask[i, :n], soft[i, :n] = 1, o.trace.soft.float()
    return replay_metrics(roll, old, mask, soft)


def _traced(o, **fields):
    import dataclasses
    return dataclasses.replace(o, trace=dataclasses.replace(o.trace, **fields))


def test_bf16_rounding_stays_under_the_bf16_bound_and_real_mismatches_exceed_it(
        tiny_qwen3_vl_small, monkeypatch, capsys):
    """A bf16 rollout of the tiny model (logits of std ~4, |ℓ| up to ~20: a real model's scale)
    replayed in bf16: every part of the check stays under the bf16 bound (and over the fp32 one:
    this is bf16's rounding, not fp32's); the same records replayed with a real mismatch exceed
    it: candidates 1 and 2 exchanged at every soft step, the response positions shifted by one,
    the fed-back mixtures at another temperature (τ × 2: fixed mode's 0.5 fed back as 1)."""
    import soft_spatial.engines.replay as replay
    from soft_spatial.engines import LocalEngine
    from soft_spatial.softthink import SamplingConfig, SoftThinkingConfig
    eng = LocalEngine.from_pretrained(tiny_qwen3_vl_small, dtype=torch.bfloat16)
    ids = [eng.tokenizer(t).input_ids for t in ("Which side is red? A. left B. right",
                                                 "Is the green cube left of the chair?")]
    prompts = [i[:min(map(len, ids))] for i in ids]
    outs = eng.generate(prompts, soft_thinking=SoftThinkingConfig(mode="fixed"),
                        sampling=SamplingConfig(max_new_tokens=32), n=2, seed=1)
    c = ReplayCheckConfig()
    rounding = _metrics(eng, prompts, outs)
    assert set(rounding) >= {"soft/replay_max_abs_diff", "soft/replay_max_abs_diff_soft",
                             "soft/replay_max_abs_diff_step0"}
    assert check_replay(rounding, c, step=1, dtype="bfloat16") == 0.0
    assert rounding["soft/replay_max_abs_diff_soft"] > c.fp32_bound
    assert "WARNING soft_spatial" not in capsys.readouterr().err

    def swapped(o):
        t, s = o.trace.topk_ids.clone(), o.trace.soft
        t[s, 1], t[s, 2] = o.trace.topk_ids[s, 2], o.trace.topk_ids[s, 1]
        return _traced(o, topk_ids=t)

    mismatches = {"candidates": _metrics(eng, prompts, [swapped(o) for o in outs]),
                  "mixture": _metrics(eng, prompts, [_traced(o, tau=o.trace.tau * 2)
                                                     for o in outs])}
    original = replay.prefill_position_ids

    def shifted(model, ids, mask, **mm):  # the response's positions (after the prompt) + 1
        pos, deltas = original(model, ids, mask, **mm)
        pos = pos.clone()
        pos[..., len(prompts[0]):] += 1
        return pos, deltas

    monkeypatch.setattr(replay, "prefill_position_ids", shifted)
    mismatches["positions"] = _metrics(eng, prompts, outs)
    for name, m in mismatches.items():
        assert check_replay(m, c, step=2, dtype="bfloat16") == 1.0, (name, m)
        # step 0 is scored on its own candidates, and its input is the prompt alone: only the
        # exchanged candidates reach it
        assert (m["soft/replay_max_abs_diff_step0"] < c.bf16_bound) == (name != "candidates")
    assert capsys.readouterr().err.count("exceeds the bound") == 3


def _compose(*overrides, cluster="cpu"):
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
        return compose(config_name="train", overrides=["model=tiny", f"cluster={cluster}",
                                                       *overrides])


@pytest.mark.parametrize("override", ["algorithm.rollout_correction.rollout_is=token",
                                      "algorithm.rollout_correction.rollout_rs=seq_mean_k1",
                                      "algorithm.rollout_correction.bypass_mode=true"])
def test_rollout_correction_is_refused_with_soft_thinking(override, tmp_path):
    cfg = _compose(override, f"trainer.default_local_dir={tmp_path / 'run'}")
    with pytest.raises(ValueError, match=override.split("=")[0].replace(".", r"\.")):
        preflight(cfg)
    assert not (tmp_path / "run").exists()
    check_rollout_correction(cfg.algorithm, soft=False)  # hard thinking: verl's own business


def test_the_composed_presets_pass_and_carry_the_replay_check():
    from soft_spatial.softthink.settings import SoftSettings
    for recipe in ([], ["recipe=synthetic_cpu"]):
        cfg = _compose(*recipe)
        check_rollout_correction(cfg.algorithm, soft=True)
        s = SoftSettings.from_dict(cfg.actor_rollout_ref.rollout.custom)
        assert s.replay_check == ReplayCheckConfig()
    recipe = SoftSettings.from_dict(_compose("recipe=synthetic_cpu").actor_rollout_ref.rollout.custom)
    assert recipe.density == DensityConfig.reference() and not recipe.density.exact
    cfg = _compose("replay_check.on_exceed=stop", "replay_check.bound=0.01")
    s = SoftSettings.from_dict(cfg.actor_rollout_ref.rollout.custom)
    assert s.replay_check == ReplayCheckConfig(bound=0.01, on_exceed="stop")
