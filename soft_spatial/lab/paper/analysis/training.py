"""Fig. 5: τ over training, the mean and the min–max range per step (``metrics.jsonl``:
``soft/tau_mean``, ``soft/tau_min``, ``soft/tau_max`` of each step's rollouts)."""
from __future__ import annotations


import numpy as np

from soft_spatial.lab.paper.analysis.plotting import pyplot, save

__all__ = ["tau_over_training", "plot_tau_over_training"]


def tau_over_training(m: dict[str, np.ndarray]) -> dict:
    """The numbers behind Fig. 5: τ mean at the first and last step, the range of the mean
    across steps, and the overall min/max of the per-step extremes."""
    mean, lo, hi = m["soft/tau_mean"], m["soft/tau_min"], m["soft/tau_max"]
    return {"steps": int(mean.size), "first_step": int(m["step"][0]),
            "last_step": int(m["step"][-1]), "tau_mean_first": float(mean[0]),
            "tau_mean_last": float(mean[-1]), "tau_mean_min": float(mean.min()),
            "tau_mean_max": float(mean.max()), "tau_min": float(lo.min()),
            "tau_max": float(hi.max()), "range_last": [float(lo[-1]), float(hi[-1])]}


def plot_tau_over_training(m: dict[str, np.ndarray], path):
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5.5, 3.2))
    step = m["step"]
    ax.fill_between(step, m["soft/tau_min"], m["soft/tau_max"], color="#4c72b0", alpha=0.25,
                    lw=0, label="min–max")
    ax.plot(step, m["soft/tau_mean"], color="#4c72b0", lw=1.5, marker="." if step.size < 30 else None,
            label="mean")
    ax.set_xlabel("training step")
    ax.set_ylabel("τ")
    ax.set_title("Fig. 5: mixture temperature during training", fontsize=9)
    ax.legend(fontsize=8)
    return save(fig, path)
