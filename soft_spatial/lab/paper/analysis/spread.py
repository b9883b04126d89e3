"""Fig. 7: how much τ varies within a chain of thought against how much it varies across them.

Per trace (its soft steps, at least ``min_steps`` of them): the within-trace spread
P90(τ) − P10(τ) and the trace median. A group of traces reports the mean within-trace spread and
the across-trace spread P90 − P10 of the trace medians. The paper quotes 0.235 (within) against
0.093 (across): τ moves inside a trace more than between traces. Groups: all traces, correct /
incorrect answers, and short / medium / long traces (terciles of the soft-step count).
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from soft_spatial.lab.paper.analysis.data import Trace
from soft_spatial.lab.paper.analysis.plotting import pyplot, save

__all__ = ["trace_spreads", "spread_summary", "plot_spread", "PAPER"]

PAPER = {"within": 0.235, "across": 0.093}


def _spread(x: np.ndarray) -> float:
    return float(np.percentile(x, 90) - np.percentile(x, 10))


def trace_spreads(traces: Sequence[Trace], min_steps: int = 5) -> list[dict]:
    """Per trace with ≥ ``min_steps`` soft steps: within-trace spread, median τ, soft length,
    correctness."""
    out = []
    for t in traces:
        tau = t.soft_tau
        if tau.size >= min_steps:
            out.append({"within": _spread(tau), "median": float(np.median(tau)),
                        "length": int(tau.size), "correct": t.correct})
    return out


def _group(rows: list[dict]) -> dict:
    if not rows:
        return {"traces": 0, "within": None, "within_median": None, "across": None}
    within = np.array([r["within"] for r in rows])
    medians = np.array([r["median"] for r in rows])
    return {"traces": len(rows), "within": float(within.mean()),
            "within_median": float(np.median(within)),
            "across": _spread(medians) if len(rows) > 1 else None}


def spread_summary(rows: list[dict]) -> dict[str, dict]:
    """Within vs across per group (``all``, ``correct``, ``incorrect``, ``short``, ``medium``,
    ``long``); the length terciles' bounds are in ``length_bounds``."""
    if not rows:
        raise ValueError("no trace has enough soft steps for Fig. 7 (lower --min-steps?)")
    lengths = np.array([r["length"] for r in rows])
    q1, q2 = (float(v) for v in np.percentile(lengths, [100 / 3, 200 / 3]))
    groups = {"all": rows,
              "correct": [r for r in rows if r["correct"]],
              "incorrect": [r for r in rows if not r["correct"]],
              "short": [r for r in rows if r["length"] <= q1],
              "medium": [r for r in rows if q1 < r["length"] <= q2],
              "long": [r for r in rows if r["length"] > q2]}
    out = {k: _group(v) for k, v in groups.items()}
    out["length_bounds"] = [q1, q2]
    return out


def plot_spread(rows: list[dict], summary: dict[str, dict], path):
    plt = pyplot()
    fig, (a, b) = plt.subplots(1, 2, figsize=(9, 3.4), gridspec_kw={"width_ratios": [1, 1.4]})
    within = [r["within"] for r in rows]
    a.hist(within, bins=20, color="#4c72b0", alpha=0.8)
    s = summary["all"]
    a.axvline(s["within"], color="#4c72b0", ls="--", lw=1,
              label=f"mean within {s['within']:.3f}")
    if s["across"] is not None:
        a.axvline(s["across"], color="#c44e52", lw=1.5, label=f"across medians {s['across']:.3f}")
    a.set_xlabel("within-trace τ spread (P90 − P10)")
    a.set_ylabel("traces")
    a.legend(fontsize=7)
    names = ["all", "correct", "incorrect", "short", "medium", "long"]
    x = np.arange(len(names))
    val = lambda key: [summary[n][key] if summary[n][key] is not None else np.nan  # noqa: E731
                       for n in names]
    b.bar(x - 0.2, val("within"), 0.4, color="#4c72b0", label="within trace (mean)")
    b.bar(x + 0.2, val("across"), 0.4, color="#c44e52", label="across trace medians")
    b.set_xticks(x, [f"{n}\n({summary[n]['traces']})" for n in names], fontsize=8)
    b.set_ylabel("τ spread (P90 − P10)")
    b.legend(fontsize=7)
    fig.suptitle("Fig. 7: τ spread within traces vs across trace medians", fontsize=9)
    return save(fig, path)
