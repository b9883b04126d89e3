"""Fig. 6, τ against the normalised entropy (soft_spatial/lab/paper/analysis/tau_entropy.py) through
``python -m soft_spatial.analysis fig6``: the correlation and each bin's count, median and 10th
percentile against a direct computation on traces with known τ and Ĥ (the ``eval_dir`` fixture,
tests/support/analysis_helpers.py); the figure and ``analysis.json``."""
import json

import numpy as np
import pytest

from soft_spatial.lab.paper.analysis.cli import main


def test_fig6_numbers_equal_direct_computation(eval_dir, tmp_path):
    d, truth = eval_dir
    res = main(["fig6", str(d), "--bins", "5", "--min-count", "10"])
    tau = np.concatenate([t for t, _, _ in truth])
    ent = np.concatenate([e for _, e, _ in truth])
    assert res["steps"] == tau.size
    assert res["r"] == pytest.approx(np.corrcoef(ent, tau)[0, 1], abs=1e-9)
    assert res["r"] < -0.8  # τ falls with entropy by construction
    for b in range(5):
        lo, hi = b / 5, (b + 1) / 5
        sel = (ent >= lo) & ((ent < hi) if b < 4 else (ent <= hi))
        assert res["count"][b] == sel.sum()
        assert res["median"][b] == pytest.approx(np.median(tau[sel]), abs=1e-9)
        assert res["p10"][b] == pytest.approx(np.percentile(tau[sel], 10), abs=1e-9)
    assert res["median_low"] == res["median"][0] > res["median_high"] == res["median"][-1]
    assert (d / "analysis" / "fig6_tau_entropy.png").stat().st_size > 5000
    saved = json.loads((d / "analysis" / "analysis.json").read_text())["fig6"]
    assert saved["r"] == res["r"]
