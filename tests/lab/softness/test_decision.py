"""The softness experiment's Phase 1 analysis and registered decision (soft_spatial/lab/
softness.py) on seed directories written here with known per-question accuracies: the paired
effects against numpy, pass@k against enumeration, and each outcome of the rule."""
from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest

from soft_spatial.lab.softness.decision import CEILING, decide, main, seed_effects

TASK = {1: "path_known", 2: "path_two", 3: "path_three"}
ARMS = ("hard", "soft_fixed", "soft_fixed_hi", "adaptsoft")


def _seed(root: Path, name: str, correct, hard_decoded=None, gates=True, reward_up=True):
    """``correct(arm, m, q) -> right samples of 8``; 20 questions per m."""
    d = root / name
    rows = [{"id": f"{m}{q:02d}_0", "synthetic_task": TASK[m], "t_star": 3 + q % 4,
             "true_branch": 0, "branches": [{"cells": ["a1"]}] * m}
            for m in (1, 2, 3) for q in range(20)]
    (d / "data" / "OmniSpatial-test").mkdir(parents=True)
    (d / "data" / "OmniSpatial-test" / "data.json").write_text(json.dumps(rows))
    evals = {f"{a}_trained": (lambda m, q, a=a: correct(a, m, q)) for a in ARMS}
    if hard_decoded:
        evals["adaptsoft_trained_hard"] = hard_decoded
    for ev, fn in evals.items():
        (d / "eval" / ev).mkdir(parents=True)
        lines = [{"question_id": r["id"], "question_index": i, "sample": s,
                  "correct": s < fn(int(r["id"][0]), int(r["id"][1:3]))}
                 for i, r in enumerate(rows) for s in range(8)]
        (d / "eval" / ev / "samples.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    for a in ARMS:
        ck = d / "runs" / a / "checkpoints"
        ck.mkdir(parents=True)
        ck.joinpath("metrics.jsonl").write_text("".join(json.dumps({"step": t, "data": {
            "critic/score/mean": (0.1 * t if reward_up else 0.5) + 0.01 * (t % 3),
            "actor/kl_loss": 0.01, "soft/never_closed_rate": 0.0}}) + "\n" for t in range(1, 21)))
    (d / "gates.json").write_text(json.dumps({"passed": gates}))
    return d


def _base(m, q):
    return 2 + (q * 7 + m) % 5  # 2..6 of 8 right, varying by question


def test_paired_effects_and_pass_at_k_match_independent_computations(tmp_path):
    def correct(arm, m, q):
        return min(8, _base(m, q) + (2 if arm == "adaptsoft" and m > 1 and q % 2 else 0))

    s = seed_effects(_seed(tmp_path, "seed1", correct))
    amb = [(m, q) for m in (2, 3) for q in range(20)]
    d = np.array([12.5 * (correct("adaptsoft", m, q) - correct("hard", m, q)) for m, q in amb])
    assert s["pairs"]["primary"]["mean"] == pytest.approx(d.mean())
    assert s["pairs"]["primary"]["variance"] == pytest.approx(d.var(ddof=1) / len(d))
    # pass@4 by enumerating every 4-subset of the 8 samples of each question
    def enum(c, k):
        right = [True] * c + [False] * (8 - c)
        subsets = list(itertools.combinations(range(8), k))
        return sum(any(right[i] for i in sub) for sub in subsets) / len(subsets)
    ref = 100 * np.mean([enum(correct("hard", m, q), 4) for m, q in amb])
    assert s["pass_at_k"]["hard"]["4"] == pytest.approx(ref)
    assert s["accuracy"]["hard"]["1"] == pytest.approx(100 * np.mean([_base(1, q) / 8 for q in range(20)]))
    assert s["by_t_star"]["hard"]["2,3"] == pytest.approx(
        100 * np.mean([_base(2, q) / 8 for q in range(20) if q % 4 == 0]))


def _three(tmp_path, gain_amb, gain_ctrl=0, per_seed=(0, 0, 0), **kw):
    seeds = []
    for i, extra in enumerate(per_seed):
        def correct(arm, m, q, extra=extra):
            b = _base(m, q)
            if arm == "adaptsoft":
                b += (gain_amb + extra) if m > 1 else gain_ctrl
            return int(min(8, max(0, b)))
        seeds.append(seed_effects(_seed(tmp_path, f"seed{i + 1}", correct, **kw)))
    return seeds


def test_a_clear_superposition_advantage_is_support(tmp_path):
    """adaptsoft +2..3 samples of 8 on every ambiguous item, nothing on m = 1, above the ceilings,
    and gone when decoded hard."""
    seeds = []
    for i in range(3):
        seeds.append(seed_effects(_seed(tmp_path, f"s{i}", lambda a, m, q, i=i: (
            8 - (q + i) % 2 if a == "adaptsoft" and m > 1 else _base(m, q)),
            hard_decoded=lambda m, q: _base(m, q))))
    assert all(s["accuracy"]["adaptsoft"][str(m)] > CEILING[m] for s in seeds for m in (2, 3))
    out = decide(seeds)
    assert out["outcome"] == "support", out


def test_no_difference_is_a_refutation_and_disagreeing_seeds_inconclusive(tmp_path):
    same = _three(tmp_path / "a", gain_amb=0)
    assert decide(same)["outcome"] == "refutation"
    mixed = _three(tmp_path / "b", gain_amb=0, per_seed=(3, -3, 3))
    out = decide(mixed)
    assert out["outcome"] == "inconclusive" and "disagree" in out["reasons"][0]


def test_a_failed_gate_or_a_flat_hard_arm_makes_it_inconclusive(tmp_path):
    assert decide(_three(tmp_path / "g", gain_amb=3, gates=False))["outcome"] == "inconclusive"
    out = decide(_three(tmp_path / "r", gain_amb=3, reward_up=False))
    assert out["outcome"] == "inconclusive" and "does not learn" in out["reasons"][0]


def test_the_command_writes_its_table_and_refuses_a_directory_without_runs(tmp_path):
    seeds = [_seed(tmp_path, f"seed{i}", lambda a, m, q: _base(m, q)) for i in (1, 2)]
    result = main([*map(str, seeds), "--out", str(tmp_path / "out")])
    assert (tmp_path / "out" / "softness.md").read_text().count("| primary |") == 1
    assert result["decision"]["outcome"] in ("refutation", "inconclusive")
    with pytest.raises(SystemExit, match="no eval/"):
        main([str(tmp_path / "nothing"), "--out", str(tmp_path / "o2")])
