"""Fig. 7, τ's spread within traces against the spread of trace medians
(soft_spatial/lab/paper/analysis/spread.py) through ``python -m soft_spatial.analysis fig7``: each
group's numbers (all, by correctness, by length) against a direct computation on traces with known
τ (the ``eval_dir`` fixture, tests/support/analysis_helpers.py); the figure."""
import numpy as np
import pytest

from soft_spatial.lab.paper.analysis.cli import main


def test_fig7_spreads_equal_direct_computation(eval_dir):
    d, truth = eval_dir
    res = main(["fig7", str(d), "--min-steps", "5"])["summary"]
    spread = lambda x: np.percentile(x, 90) - np.percentile(x, 10)  # noqa: E731
    within = [spread(t) for t, _, _ in truth]
    medians = [np.median(t) for t, _, _ in truth]
    assert res["all"]["traces"] == 12
    assert res["all"]["within"] == pytest.approx(np.mean(within), abs=1e-9)
    assert res["all"]["across"] == pytest.approx(spread(medians), abs=1e-9)
    ok = [i for i, (_, _, c) in enumerate(truth) if c]
    assert res["correct"]["traces"] == len(ok)
    assert res["correct"]["within"] == pytest.approx(np.mean([within[i] for i in ok]), abs=1e-9)
    assert res["incorrect"]["traces"] == 12 - len(ok)
    assert sum(res[g]["traces"] for g in ("short", "medium", "long")) == 12
    assert (d / "analysis" / "fig7_tau_spread.png").stat().st_size > 5000
