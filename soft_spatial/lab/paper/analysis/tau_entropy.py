"""Fig. 6: τ against the normalised top-K entropy Ĥ over all soft steps of an evaluation.

Ĥ is cut into equal-width bins on [0, 1]; each bin with at least ``min_count`` steps reports the
median and the 10th/90th percentiles of τ. The paper quotes the median going from 0.590 (lowest
entropy bin) to 0.350 (highest) and the Pearson correlation r = −0.613 between τ and Ĥ.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from soft_spatial.lab.paper.analysis.plotting import pyplot, save

__all__ = ["tau_vs_entropy", "plot_tau_vs_entropy", "PAPER"]

PAPER = {"median_low": 0.590, "median_high": 0.350, "r": -0.613}


def tau_vs_entropy(entropy: np.ndarray, tau: np.ndarray, bins: int = 10,
                   min_count: int = 20) -> dict:
    """Per-bin τ median / p10 / p90 (bins with ≥ ``min_count`` steps; others None), Pearson r,
    and the medians of the lowest and highest such bins."""
    entropy, tau = np.asarray(entropy, np.float64), np.asarray(tau, np.float64)
    if entropy.shape != tau.shape or entropy.ndim != 1:
        raise ValueError("entropy and tau must be 1-D arrays of the same length")
    if tau.size < 2:
        raise ValueError(f"need at least 2 soft steps, got {tau.size}")
    edges = np.linspace(0.0, 1.0, bins + 1)
    idx = np.clip(np.digitize(entropy, edges[1:-1]), 0, bins - 1)
    med, p10, p90, count = [], [], [], []
    for b in range(bins):
        t = tau[idx == b]
        count.append(int(t.size))
        ok = t.size >= min_count
        med.append(float(np.median(t)) if ok else None)
        p10.append(float(np.percentile(t, 10)) if ok else None)
        p90.append(float(np.percentile(t, 90)) if ok else None)
    filled = [m for m in med if m is not None]
    r = None
    if tau.std() > 0 and entropy.std() > 0:
        r = float(np.corrcoef(entropy, tau)[0, 1])
    return {"edges": edges.tolist(), "count": count, "median": med, "p10": p10, "p90": p90,
            "r": r, "steps": int(tau.size), "min_count": min_count,
            "median_low": filled[0] if filled else None,
            "median_high": filled[-1] if filled else None}


def plot_tau_vs_entropy(entropy: Sequence[float], tau: Sequence[float], res: dict, path):
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5.2, 3.8))
    tau = np.asarray(tau)
    lo, hi = float(min(tau.min(), 0.0)), float(max(tau.max(), 1.0))
    h = ax.hist2d(entropy, tau, bins=[np.asarray(res["edges"]), np.linspace(lo, hi, 41)],
                  cmap="Greys", cmin=1)
    fig.colorbar(h[3], ax=ax, label="soft steps")
    centres = 0.5 * (np.asarray(res["edges"][:-1]) + np.asarray(res["edges"][1:]))
    ok = np.array([m is not None for m in res["median"]])
    if ok.any():
        pick = lambda key: np.array([v for v, k in zip(res[key], ok) if k], float)  # noqa: E731
        ax.plot(centres[ok], pick("median"), "o-", color="#c44e52", label="median")
        ax.fill_between(centres[ok], pick("p10"), pick("p90"), color="#c44e52", alpha=0.2,
                        label="10th–90th pct.")
    r = "–" if res["r"] is None else f"{res['r']:.3f}"
    ax.set_title(f"Fig. 6: τ vs. entropy (r = {r}, {res['steps']} steps)", fontsize=9)
    ax.set_xlabel("normalised top-K entropy $\\hat H$")
    ax.set_ylabel("τ")
    ax.set_xlim(0, 1)
    ax.legend(fontsize=8, loc="upper right")
    return save(fig, path)
