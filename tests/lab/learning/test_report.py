"""The learning experiment's report (soft_spatial/lab/learning/report.py): the paired difference
against independent computations (scipy), the metrics read as verl's file logger
wrote them, the table, its checks and figures from files with known contents, step times as
medians without the start-up step."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from soft_spatial.data.synthetic import write_benchmark
from soft_spatial.lab.learning.report import paired_difference, per_question, read_metrics, write_report


def test_paired_difference_matches_an_independent_computation():
    rng = np.random.default_rng(0)
    before = {q: {"acc": float(a), "category": "c"} for q, a in enumerate(rng.integers(0, 5, 200) / 4)}
    after = {q: {"acc": min(1.0, v["acc"] + float(rng.integers(0, 2)) / 4), "category": "c"}
             for q, v in before.items()}
    r = paired_difference(before, after)
    d = np.array([after[q]["acc"] - before[q]["acc"] for q in range(200)]) * 100
    lo, hi = stats.norm.interval(0.95, loc=d.mean(), scale=d.std(ddof=1) / math.sqrt(len(d)))
    assert r["n"] == 200 and r["diff"] == pytest.approx(d.mean())
    assert (r["lo"], r["hi"]) == pytest.approx((lo, hi))
    assert r["after"] - r["before"] == pytest.approx(r["diff"])
    assert paired_difference(before, after, [])["diff"] is None


def test_read_metrics_keeps_the_last_line_of_a_step(tmp_path):
    p = tmp_path / "metrics.jsonl"
    lines = [{"step": 1, "data": {"r": 0.1}}, {"step": 2, "data": {"r": 0.2}},
             {"step": 2, "data": {"r": 0.3}}]  # a resumed run logs step 2 again
    p.write_text("".join(json.dumps(x) + "\n" for x in lines) + '{"step": 3, "da')
    assert read_metrics(p) == [{"step": 1, "r": 0.1}, {"step": 2, "r": 0.3}]
    assert read_metrics(tmp_path / "missing.jsonl") == []


def _samples(path: Path, correct: dict, subcategory: str = "Localization"):
    path.mkdir(parents=True)
    rows = [{"benchmark": "omnispatial", "question_index": q, "sample": s, "category": "x",
             "subcategory": subcategory, "correct": c}
            for q, cs in correct.items() for s, c in enumerate(cs)]
    (path / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_report_table_checks_and_figures(tmp_path):
    bench = tmp_path / "bench"
    write_benchmark(bench, train=10, test=10, seed=0)
    _samples(tmp_path / "before", {0: [0, 0], 1: [1, 0], 2: [0, 0]})
    _samples(tmp_path / "after", {0: [1, 1], 1: [1, 1], 2: [1, 0]})
    assert per_question(tmp_path / "after" / "samples.jsonl")[2] == {
        "acc": 0.5, "category": "relative_position", "n": 2}
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text("".join(json.dumps({"step": i + 1, "data": {
        "critic/score/mean": 0.1 * i, "reward/acc_mean": 0.05 * i, "soft/tau_mean": 0.5,
        "soft/tau_min": 0.4 - 0.01 * i, "soft/tau_max": 0.6, "actor/adaptsoft/alpha_rms": 1e-3,
        "actor/adaptsoft/grad_norm": 0.1, "actor/grad_norm": 1.0,
        "timing_s/step": 60.0 if i == 0 else 10.0 + i, "timing_s/gen": 5.0}}) + "\n" for i in range(8)))
    res = write_report(tmp_path, {"adaptsoft": {"before": tmp_path / "before",
                                                "after": tmp_path / "after", "metrics": metrics}},
                       bench, tau0=0.5, seed=0, budget="demo")
    o = res["modes"]["adaptsoft"]["overall"]
    assert o["before"] == pytest.approx(100 / 6) and o["after"] == pytest.approx(500 / 6)
    md = (tmp_path / "report.md").read_text()
    assert "| adaptsoft | 16.7 | 83.3 | +66.7 [+34.0, +99.3] |" in md  # d = (1, .5, .5)
    assert md.count("- [x]") == 4 and "| 8 | 0.500 | 0.330 | 0.600 |" in md
    # step 1 (start-up) aside: steps 2..8 took 11..17 s, median 14; the rollout 5 s every step
    assert res["modes"]["adaptsoft"]["step_time_s"] == {"steps_timed": 7, "timing_s/step": 14.0,
                                                        "timing_s/gen": 5.0}
    assert "| adaptsoft | 14.0 | 5.0 | – | – | – | 7 |" in md
    for png in ("reward.png", "tau.png"):
        assert (tmp_path / png).read_bytes()[:4] == b"\x89PNG"


def test_step_times_are_medians_without_the_first_step():
    import random
    import statistics

    from soft_spatial.lab.learning.report import step_times
    rng = random.Random(0)
    for n in range(1, 12):
        rows = [{"step": i + 1, "timing_s/step": rng.uniform(1, 50), "timing_s/ref": rng.uniform(0, 5)}
                for i in range(n)]
        timed = rows[1:] if n > 1 else rows
        got = step_times(rows)
        assert got["steps_timed"] == len(timed)
        for key in ("timing_s/step", "timing_s/ref"):
            assert got[key] == pytest.approx(statistics.median(r[key] for r in timed))
        assert "timing_s/gen" not in got
