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
                                                  check_rollout_correction, replay_metrics)
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
    assert check_replay(m, ReplayCheckConfig(bound=1e-3), step=4) == 0.0
    assert check_replay({}, ReplayCheckConfig(bound=1e-3), step=4) == 0.0
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("value", [17.02, math.nan, math.inf])
def test_over_the_bound_warns_loudly_or_stops(capsys, value):
    m = {"soft/replay_max_abs_diff": 0.5, "soft/replay_max_abs_diff_soft": value}
    assert check_replay(m, ReplayCheckConfig(bound=1.0), step=7) == 1.0
    err = capsys.readouterr().err
    assert err.startswith("WARNING soft_spatial: step 7: soft/replay_max_abs_diff_soft = ")
    assert "bound 1 (actor_rollout_ref.rollout.custom.replay_check.bound)" in err
    assert "on_exceed=warn" in err
    with pytest.raises(ReplayMismatch, match=r"step 7: soft/replay_max_abs_diff_soft .*"
                       r"on_exceed=stop.*resumes from its last checkpoint"):
        check_replay(m, ReplayCheckConfig(bound=1.0, on_exceed="stop"), step=7)


def test_the_setting_is_checked_and_named():
    with pytest.raises(ValueError, match="on_exceed"):
        ReplayCheckConfig(on_exceed="ignore")
    with pytest.raises(ValueError, match="bound"):
        ReplayCheckConfig(bound=0.0)


def _compose(*overrides):
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
        return compose(config_name="train", overrides=["model=tiny", "cluster=cpu", *overrides])


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
