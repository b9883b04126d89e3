"""The learning experiment's report: accuracy before/after with paired 95% CIs, per category,
the training reward curves, the τ diagnostics and the checks of issue 11.

Accuracy is mean@k: every (question, sample) counts once. The difference after − before is paired
by question: d_i = acc_after(i) − acc_before(i) (each the mean over its k samples), and the 95%
interval is mean(d) ± 1.96·sd(d)/√n over the n held-out questions (both evaluations use the same
questions and seeds).
"""
from __future__ import annotations

import json
import math
import statistics
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path

from soft_spatial.data.synthetic import SUB_TASK_TO_TASK, chance_levels_of_release
from soft_spatial.eval.runner import read_results
from soft_spatial.infra.run_dir import read_metrics  # the one reader of metrics.jsonl (re-exported)
from soft_spatial.lab.paper.analysis.data import load_metrics
from soft_spatial.lab.paper.analysis.training import plot_tau_over_training
from soft_spatial.lab.learning.effects import Z975, paired_mean, trend

__all__ = ["read_metrics", "per_question", "paired_difference", "run_tau0", "write_report",
           "step_times", "CATEGORY_ORDER", "STEP_TIMES"]

CATEGORY_ORDER = ("relative_position", "depth_order", "egocentric", "mental_rotation", "counting")


def per_question(samples_jsonl) -> dict[int, dict]:
    """``{question_index: {"acc": mean over samples, "category", "n"}}`` from eval's JSONL."""

    acc: dict[int, list[float]] = defaultdict(list)
    cat: dict[int, str] = {}
    for r in read_results(Path(samples_jsonl)):
        acc[r["question_index"]].append(float(bool(r["correct"])))
        cat[r["question_index"]] = SUB_TASK_TO_TASK.get(r.get("subcategory"), r["category"])
    return {q: {"acc": sum(v) / len(v), "category": cat[q], "n": len(v)} for q, v in acc.items()}


def paired_difference(before: Mapping[int, dict], after: Mapping[int, dict],
                      questions: Sequence[int] = None) -> dict:
    """Mean accuracies (%) and the paired difference with its 95% CI over ``questions``
    (default: all questions evaluated in both)."""
    qs = sorted(set(before) & set(after)) if questions is None else list(questions)
    if not qs:
        return {"n": 0, "before": None, "after": None, "diff": None, "lo": None, "hi": None}
    n = len(qs)
    if n > 1:
        p = paired_mean({q: after[q]["acc"] for q in qs}, {q: before[q]["acc"] for q in qs}, qs)
        mean, half = p.mean, Z975 * math.sqrt(p.variance)
    else:
        mean, half = after[qs[0]]["acc"] - before[qs[0]]["acc"], 0.0
    b = 100 * sum(before[q]["acc"] for q in qs) / n
    a = 100 * sum(after[q]["acc"] for q in qs) / n
    return {"n": n, "before": b, "after": a, "diff": 100 * mean, "lo": 100 * (mean - half),
            "hi": 100 * (mean + half)}


#: verl's per-step timings (seconds) the report shows, with their column names
STEP_TIMES = (("timing_s/step", "step"), ("timing_s/gen", "rollout"),
              ("timing_s/old_log_prob", "old log-prob"), ("timing_s/ref", "ref log-prob"),
              ("timing_s/update_actor", "update"))


def step_times(metrics: list[dict]) -> dict:
    """The median of each of :data:`STEP_TIMES` over a run's steps, the first step aside when
    there are others (it pays for start-up: the first rollout and the first update's warm-up);
    ``steps_timed``: how many steps the medians cover. Keys absent from the metrics are left out."""
    timed = metrics[1:] if len(metrics) > 1 else metrics
    out: dict = {"steps_timed": len(timed)}
    for key, _ in STEP_TIMES:
        values = [m[key] for m in timed if key in m]
        if values:
            out[key] = statistics.median(values)
    return out


def _step_time_lines(times: Mapping[str, dict]) -> list[str]:
    if not any(len(t) > 1 for t in times.values()):
        return []
    head = ["mode"] + [name for _, name in STEP_TIMES] + ["steps"]
    lines = ["## Step time (s, median over steps 2..n)", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for mode, t in times.items():
        lines.append("| " + " | ".join([mode] + [f"{t[k]:.1f}" if k in t else "–"
                                                for k, _ in STEP_TIMES] + [str(t["steps_timed"])]) + " |")
    return lines + [""]


def _fmt_ci(r: dict) -> str:
    if r["diff"] is None:
        return "–"
    return f"{r['diff']:+.1f} [{r['lo']:+.1f}, {r['hi']:+.1f}]"


def _series(metrics: list[dict], key: str) -> list[float]:
    return [m[key] for m in metrics if key in m]


def _plot(path: Path, curves: dict[str, list[float]], ylabel: str, title: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.6), dpi=110)
    for name, ys in curves.items():
        xs = list(range(1, len(ys) + 1))
        ax.plot(xs, ys, marker=".", label=name)
    ax.set_xlabel("training step")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def run_tau0(runs) -> float:
    """τ₀ of the adaptsoft run (its settings file beside the checkpoints; the default without
    one): the report's reference line for τ."""
    from soft_spatial.softthink.settings import SoftSettings, settings_file

    found = settings_file(runs["adaptsoft"]["metrics"].parent) if "adaptsoft" in runs else None
    return (SoftSettings.load(found) if found else SoftSettings()).adaptsoft.tau0


def write_report(out, runs: Mapping[str, Mapping[str, Path]], data_dir, tau0: float,
                 seed: int, budget: str) -> dict:
    """``report.md``, ``reward.png``, ``tau.png`` (adaptsoft) and ``results.json`` under ``out``.

    ``runs[mode]`` holds the ``before`` and ``after`` evaluation directories and the training
    ``metrics`` file.
    """

    out = Path(out)
    chance = chance_levels_of_release(Path(data_dir) / "OmniSpatial-test")
    results: dict = {"seed": seed, "budget": budget, "tau0": tau0, "chance": chance, "modes": {}}
    cats = [c for c in CATEGORY_ORDER if c in chance]
    head = ["mode", "before", "after", "Δ [95% CI]"] + cats
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    rewards, acc_curves = {}, {}
    for mode, r in runs.items():
        before = per_question(Path(r["before"]) / "samples.jsonl")
        after = per_question(Path(r["after"]) / "samples.jsonl")
        overall = paired_difference(before, after)
        per_cat = {c: paired_difference(before, after, [q for q in before if before[q][
            "category"] == c and q in after]) for c in cats}
        metrics = read_metrics(r["metrics"])
        reward = _series(metrics, "critic/score/mean")
        rewards[mode] = reward
        acc_curves[mode] = _series(metrics, "reward/acc_mean")
        last = metrics[-1] if metrics else {}
        ctrl = {k: [m[k] for m in metrics if k in m] for k in (
            "actor/adaptsoft/alpha_rms", "actor/adaptsoft/grad_norm", "soft/tau_mean",
            "soft/tau_min", "soft/tau_max", "actor/grad_norm")}
        results["modes"][mode] = {
            "overall": overall, "categories": per_cat, "reward": reward, "reward_trend":
            trend(reward), "steps": len(metrics), "final_step": last.get("step"),
            "step_time_s": step_times(metrics),
            **{k.split("/", 1)[1]: v for k, v in ctrl.items() if v}}
        cells = [mode, f"{overall['before']:.1f}", f"{overall['after']:.1f}", _fmt_ci(overall)]
        cells += [f"{per_cat[c]['before']:.0f} → {per_cat[c]['after']:.0f}"
                  if per_cat[c]["n"] else "–" for c in cats]
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("| chance | " + f"{chance['overall']:.1f} | | | "
                 + " | ".join(f"{chance[c]:.0f}" for c in cats) + " |")

    _plot(out / "reward.png", rewards, "mean training reward (answer 1.0 + format 0.2)",
          f"GRPO on the synthetic benchmark (seed {seed})")
    md = [f"# Learning experiment (budget {budget}, seed {seed})", "",
          "Held-out accuracy (%, mean@k over the test split) of the warm start (before) and of "
          "the policy trained from it (after); Δ = after − before with a paired 95% CI over "
          "questions; per category: before → after.", "", *lines, ""]
    md += _step_time_lines({m: r["step_time_s"] for m, r in results["modes"].items()})
    md += _checks(results, tau0)
    if "adaptsoft" in runs:
        a = results["modes"]["adaptsoft"]
        if a.get("tau_mean"):

            plot_tau_over_training(load_metrics(runs["adaptsoft"]["metrics"]), out / "tau.png")
            md += ["", "## AdaptSoft τ per training step (rollouts; soft steps)", "",
                   "| step | τ mean | τ min | τ max | alpha_rms | controller grad norm |",
                   "|---|---|---|---|---|---|"]
            md += [f"| {i + 1} | {m:.3f} | {lo:.3f} | {hi:.3f} | {al:.3g} | {g:.3g} |"
                   for i, (m, lo, hi, al, g) in enumerate(zip(
                       a["tau_mean"], a["tau_min"], a["tau_max"], a.get("adaptsoft/alpha_rms", []),
                       a.get("adaptsoft/grad_norm", [])))]
    md += ["", "Figures: `reward.png` (mean training reward per step)"
           + (", `tau.png` (τ mean with its min..max band: the paper's Fig. 5, drawn by "
              "`soft_spatial.lab.paper.analysis`), `analysis/` (Figs. 4–7 of the trained policy)"
              if "adaptsoft" in runs else "") + "."]
    (out / "report.md").write_text("\n".join(md) + "\n")
    (out / "results.json").write_text(json.dumps(results, indent=2))
    return results


def _checks(results: dict, tau0: float) -> list[str]:
    """The "what must hold" list of issue 11, each with the numbers that decide it."""
    a = results["modes"].get("adaptsoft")
    if a is None:
        return []
    o, t = a["overall"], a["reward_trend"]
    alpha = a.get("adaptsoft/alpha_rms", [])
    gn = a.get("adaptsoft/grad_norm", [])
    tmin, tmax = min(a.get("tau_min", [tau0])), max(a.get("tau_max", [tau0]))
    rows = [
        ("held-out accuracy above the warm start, 95% CI excludes 0",
         o["lo"] is not None and o["lo"] > 0, _fmt_ci(o)),
        ("mean training reward rises (slope CI above 0)",
         t["slope_lo"] is not None and t["slope_lo"] > 0,
         "–" if t["slope"] is None else f"first quarter {t['first']:.3f}, last quarter "
         f"{t['last']:.3f}, slope {t['slope']:+.4f}/step [{t['slope_lo']:+.4f}, "
         f"{t['slope_hi']:+.4f}]"),
        ("controller gets gradient (alpha_rms > 0, grad_norm > 0)",
         bool(alpha) and bool(gn) and min(alpha) > 0 and min(gn) > 0,
         f"alpha_rms {min(alpha, default=0):.3g}..{max(alpha, default=0):.3g}, grad_norm "
         f"{min(gn, default=0):.3g}..{max(gn, default=0):.3g}"),
        ("τ spreads around τ₀ (min < τ₀ < max)", tmin < tau0 < tmax,
         f"τ over the run {tmin:.3f}..{tmax:.3f}, τ₀ = {tau0}"),
    ]
    return ["## Checks (adaptsoft)", ""] + [f"- [{'x' if ok else ' '}] {name}: {why}"
                                            for name, ok, why in rows]
