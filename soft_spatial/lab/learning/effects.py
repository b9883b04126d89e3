"""Effect sizes of the lab's experiments: a paired mean and a per-step trend with their intervals
(the learning experiment's report, lab/learning/report.py), and what the softness experiment's
decision builds on them (docs/learning.md, "the decision"; lab/softness/decision.py): pass@k from n
samples, a paired difference pooled over seeds (random effects, Hartung–Knapp), and the
difference-in-differences against the unambiguous control. Plain Python: no SciPy at run time.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

__all__ = ["trend", "Z975", "pass_at_k", "t_quantile_975", "Pooled", "pool_random_effects", "Paired", "paired_mean",
           "difference_in_differences"]

Z975 = 1.959963984540054
# the 0.975 quantile of Student's t with 1..30 degrees of freedom
_T975 = (12.706204736, 4.302652730, 3.182446305, 2.776445105, 2.570581836, 2.446911851,
         2.364624252, 2.306004135, 2.262157163, 2.228138852, 2.200985160, 2.178812830,
         2.160368656, 2.144786688, 2.131449546, 2.119905299, 2.109815578, 2.100922040,
         2.093024054, 2.085963447, 2.079613845, 2.073873068, 2.068657610, 2.063898562,
         2.059538553, 2.055529439, 2.051830516, 2.048407142, 2.045229642, 2.042272456)


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased pass@k of one question from ``n`` samples of which ``c`` are right: the chance
    that ``k`` of them drawn without replacement hold a right one, 1 − C(n−c, k) / C(n, k)."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n; got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def t_quantile_975(df: int) -> float:
    """The 0.975 quantile of Student's t with ``df`` degrees of freedom (a table to 30; above, the
    Cornish–Fisher expansion in 1/df, within 1e-4 of the exact value)."""
    if df < 1:
        raise ValueError(f"t quantile needs df >= 1, got {df}")
    if df <= len(_T975):
        return _T975[df - 1]
    z = Z975
    g1 = (z ** 3 + z) / 4
    g2 = (5 * z ** 5 + 16 * z ** 3 + 3 * z) / 96
    g3 = (3 * z ** 7 + 19 * z ** 5 + 17 * z ** 3 - 15 * z) / 384
    return z + g1 / df + g2 / df ** 2 + g3 / df ** 3


@dataclass(frozen=True)
class Pooled:
    """A random-effects pooled estimate over k studies (here: seeds)."""

    estimate: float
    lo: float | None
    """95% CI (Hartung–Knapp, t with k − 1 df); None with one study."""
    hi: float | None
    tau2: float
    """Between-study variance (DerSimonian–Laird)."""
    k: int
    fixed: float
    """The fixed-effect (inverse-variance) estimate, reported beside it."""


def pool_random_effects(estimates: Sequence[float], variances: Sequence[float]) -> Pooled:
    """Pool per-seed estimates ``y_i`` with sampling variances ``v_i`` (> 0): DerSimonian–Laird
    τ², weights 1/(v_i + τ²), and the Hartung–Knapp interval μ ± t_{k−1} · sqrt(q / Σw) with
    q = Σ w_i (y_i − μ)² / (k − 1)."""
    k = len(estimates)
    if k == 0 or k != len(variances):
        raise ValueError(f"pool_random_effects: {k} estimates and {len(variances)} variances")
    if any(v <= 0 for v in variances):
        raise ValueError(f"pool_random_effects: every variance must be > 0, got {list(variances)}")
    w = [1.0 / v for v in variances]
    fixed = sum(wi * y for wi, y in zip(w, estimates)) / sum(w)
    q_stat = sum(wi * (y - fixed) ** 2 for wi, y in zip(w, estimates))
    c = sum(w) - sum(wi * wi for wi in w) / sum(w)
    tau2 = max(0.0, (q_stat - (k - 1)) / c) if k > 1 else 0.0
    ws = [1.0 / (v + tau2) for v in variances]
    mu = sum(wi * y for wi, y in zip(ws, estimates)) / sum(ws)
    if k == 1:
        return Pooled(mu, None, None, tau2, k, fixed)
    q = sum(wi * (y - mu) ** 2 for wi, y in zip(ws, estimates)) / (k - 1)
    half = t_quantile_975(k - 1) * math.sqrt(q / sum(ws))
    return Pooled(mu, mu - half, mu + half, tau2, k, fixed)


@dataclass(frozen=True)
class Paired:
    """The mean of per-question differences with its sampling variance."""

    mean: float
    variance: float
    """Of the mean: s² / n (s² the sample variance of the differences, n − 1 in its denominator)."""
    n: int


def paired_mean(a: Mapping, b: Mapping, questions=None) -> Paired:
    """Mean of ``a[q] − b[q]`` over ``questions`` (default: those in both), in the units given."""
    qs = [q for q in (a if questions is None else questions) if q in a and q in b]
    if len(qs) < 2:
        raise ValueError(f"paired_mean needs at least 2 questions in both, got {len(qs)}")
    d = [a[q] - b[q] for q in qs]
    mean = sum(d) / len(d)
    s2 = sum((x - mean) ** 2 for x in d) / (len(d) - 1)
    return Paired(mean, s2 / len(d), len(d))


def difference_in_differences(arm: Mapping, hard: Mapping, ambiguous: set) -> Paired:
    """(arm − hard) on the ambiguous questions minus (arm − hard) on the others (the m = 1
    control), with the variance of independent groups: var_amb + var_ctrl."""
    amb = paired_mean(arm, hard, [q for q in arm if q in ambiguous])
    ctrl = paired_mean(arm, hard, [q for q in arm if q not in ambiguous])
    return Paired(amb.mean - ctrl.mean, amb.variance + ctrl.variance, amb.n + ctrl.n)


def trend(values: Sequence[float]) -> dict:
    """Mean of the first and the last quarter of a per-step series and its least-squares slope
    per step with a 95% CI (normal approximation)."""
    n = len(values)
    if n < 4:
        return {"first": None, "last": None, "slope": None, "slope_lo": None, "slope_hi": None}
    q = max(1, n // 4)
    xs = list(range(n))
    mx, my = sum(xs) / n, sum(values) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, values)) / sxx
    resid = [y - (my + slope * (x - mx)) for x, y in zip(xs, values)]
    se = math.sqrt(sum(r * r for r in resid) / (n - 2) / sxx)
    return {"first": sum(values[:q]) / q, "last": sum(values[-q:]) / q, "slope": slope,
            "slope_lo": slope - Z975 * se, "slope_hi": slope + Z975 * se}
