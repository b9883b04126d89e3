"""soft_spatial.lab.learning.effects against independent references: pass@k by enumerating every subset,
the t quantiles and the paired t statistic by SciPy, the random-effects interval by its coverage
in simulation and DerSimonian–Laird's τ² by its moment equation."""
import itertools
import math
import random

import numpy as np
import pytest
from scipy import stats

from soft_spatial.lab.learning.effects import (difference_in_differences, paired_mean, pass_at_k,
                                               pool_random_effects, t_quantile_975, trend)


@pytest.mark.parametrize("n", [1, 2, 4, 8])
def test_pass_at_k_is_the_chance_that_k_drawn_samples_hold_a_right_one(n):
    for c in range(n + 1):
        samples = [1] * c + [0] * (n - c)
        for k in range(1, n + 1):
            subsets = list(itertools.combinations(range(n), k))
            want = sum(any(samples[i] for i in s) for s in subsets) / len(subsets)
            assert pass_at_k(n, c, k) == pytest.approx(want)
    with pytest.raises(ValueError, match="n=4, c=5, k=1"):
        pass_at_k(4, 5, 1)


@pytest.mark.parametrize("df", [1, 2, 3, 4, 9, 30, 31, 50, 200, 10_000])
def test_t_quantile_matches_scipy(df):
    assert t_quantile_975(df) == pytest.approx(stats.t.ppf(0.975, df), abs=1e-4)


def test_pooled_estimate_its_heterogeneity_and_degenerate_cases():
    y, v = [4.0, 9.0, -1.0, 6.0], [2.0, 3.0, 1.5, 4.0]
    p = pool_random_effects(y, v)
    w = np.array([1 / x for x in v])
    fixed = float(np.dot(w, y) / w.sum())
    assert p.fixed == pytest.approx(fixed) and p.k == 4
    # DerSimonian–Laird: τ² solves Q = (k − 1) + τ² (Σw − Σw²/Σw), floored at 0
    q = float(np.dot(w, (np.array(y) - fixed) ** 2))
    assert p.tau2 > 0 and q == pytest.approx(3 + p.tau2 * (w.sum() - (w ** 2).sum() / w.sum()))
    ws = 1 / (np.array(v) + p.tau2)
    assert p.estimate == pytest.approx(float(np.dot(ws, y) / ws.sum()))
    assert p.lo < p.estimate < p.hi
    same = pool_random_effects([2.0, 2.0, 2.0], [1.0, 1.0, 1.0])
    assert (same.tau2, same.lo, same.estimate, same.hi) == (0.0, 2.0, 2.0, 2.0)
    one = pool_random_effects([3.0], [1.0])
    assert (one.estimate, one.lo, one.hi) == (3.0, None, None)
    with pytest.raises(ValueError, match="must be > 0"):
        pool_random_effects([1.0, 2.0], [1.0, 0.0])


def test_the_hartung_knapp_interval_covers_the_mean_95_percent_of_the_time():
    """3 seeds, a true effect of 5 points, seed-to-seed spread and per-seed sampling noise:
    the 95% interval holds the true mean in 95% ± 1.5% of 4000 simulated experiments."""
    rng = random.Random(0)
    hits = 0
    for _ in range(4000):
        v = [rng.uniform(2.0, 8.0) for _ in range(3)]
        y = [5.0 + rng.gauss(0, 2.0) + rng.gauss(0, math.sqrt(vi)) for vi in v]
        p = pool_random_effects(y, v)
        hits += p.lo <= 5.0 <= p.hi
    assert abs(hits / 4000 - 0.95) < 0.015


def test_paired_mean_is_scipys_paired_t_and_diff_in_diff_is_two_differences():
    rng = np.random.default_rng(1)
    qs = range(40)
    hard = {q: float(rng.integers(0, 9)) / 8 for q in qs}
    arm = {q: float(rng.integers(0, 9)) / 8 for q in qs}
    p = paired_mean(arm, hard)
    a, b = [arm[q] for q in qs], [hard[q] for q in qs]
    assert p.n == 40 and p.mean == pytest.approx(np.mean(np.subtract(a, b)))
    assert p.mean / math.sqrt(p.variance) == pytest.approx(stats.ttest_rel(a, b).statistic)
    ambiguous = {q for q in qs if q % 3}
    did = difference_in_differences(arm, hard, ambiguous)
    d = {q: arm[q] - hard[q] for q in qs}
    amb, ctrl = [d[q] for q in qs if q in ambiguous], [d[q] for q in qs if q not in ambiguous]
    assert did.mean == pytest.approx(np.mean(amb) - np.mean(ctrl))
    assert did.variance == pytest.approx(np.var(amb, ddof=1) / len(amb) + np.var(ctrl, ddof=1) / len(ctrl))
    with pytest.raises(ValueError, match="at least 2 questions"):
        paired_mean({1: 1.0}, {1: 0.0})


def test_trend_slope_and_interval():
    ys = [0.1 + 0.02 * i + 0.01 * ((-1) ** i) for i in range(20)]
    t = trend(ys)
    fit = stats.linregress(np.arange(20), ys)
    assert t["slope"] == pytest.approx(fit.slope)
    assert t["slope_hi"] - t["slope"] == pytest.approx(1.959963984540054 * fit.stderr)
    assert t["first"] == pytest.approx(np.mean(ys[:5])) and t["last"] == pytest.approx(np.mean(ys[-5:]))
    assert trend([1.0, 2.0])["slope"] is None
