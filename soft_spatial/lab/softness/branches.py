"""What the path questions' traces show about carried hypotheses (docs/learning.md, the softness
experiment's mechanism readouts), from an evaluation's ``samples.jsonl`` and ``steps.jsonl`` and the
test split's records (their ``branches``, ``true_branch``, ``t_star``).

Each response step is typed by the word its spine token spells, counted along the chain
``move cell move cell ... [circle] ... : cell quarter``: ``move``, ``branch`` (a position word of a
step s ≤ t*, where the m hypotheses are live), ``tracked`` (a position word after t*), ``circle``,
``answer`` (``:``, the final cell, the quarter) and ``other``. At every soft ``branch`` step the
mixture weights w = softmax(z/τ) over the recorded candidates (``record_weights``, the weights the
next input was built from) give:

* ``top_weight`` (max w) and ``eff_k`` (1/Σ w²);
* ``live_mass``: Σ w over the live cells (the m trajectories' cells after that move);
* ``true_weight``: w of the true trajectory's cell (0 when it is not a candidate);
* survival: the fraction of branch steps with ``true_weight`` ≥ :data:`SURVIVAL_WEIGHT`, by step.

Also: mean τ and Ĥ by step type (soft steps only), and accuracy by m and by t*.
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import torch

from soft_spatial.data.synthetic import MOVES, PATH_CANDIDATES, QUARTERS
from soft_spatial.eval.runner import read_results
from soft_spatial.eval.steps import read_steps
from soft_spatial.softthink.mixture import record_weights

__all__ = ["SURVIVAL_WEIGHT", "path_rows", "step_types", "branch_readouts", "accuracy_by",
           "readout_table", "t_star_table"]

#: a hypothesis counts as carried while its mixture weight is at least this (the design's θ)
SURVIVAL_WEIGHT = 0.05
STEP_TYPES = ("move", "branch", "tracked", "circle", "answer", "other")


def step_types(words: list[str], t_star: int) -> list[tuple[str, int]]:
    """``(type, move index s)`` of each word of a response (module docstring); s counts the move
    words so far (the position word after move s has index s)."""
    out, s, done = [], 0, False
    for w in words:
        if done or w == ":":
            done = True
            out.append(("answer", s) if w == ":" or w in QUARTERS or _is_cell(w) else ("other", s))
        elif w in MOVES:
            s += 1
            out.append(("move", s))
        elif w == "circle":
            out.append(("circle", s))
        elif _is_cell(w) and s >= 1:
            out.append(("branch" if s <= t_star else "tracked", s))
        else:
            out.append(("other", s))
    return out


def _is_cell(w: str) -> bool:
    return len(w) == 2 and w[0] in "abcdefgh" and w[1].isdigit()


def path_rows(rows: Mapping[str, dict]) -> dict[str, dict]:
    """The path questions among a split's rows (``{id: row}``)."""
    return {k: r for k, r in rows.items() if r.get("synthetic_task") in PATH_CANDIDATES}


def branch_readouts(eval_dir: str | Path, rows: Mapping[str, dict], tokenizer) -> dict:
    """The readouts of one evaluation (module docstring), per m (key ``m``) over its samples:
    ``{m: {"branch_steps", "soft_branch_steps", "top_weight", "eff_k", "live_mass",
    "true_weight", "survival": {s: fraction}, "tau": {type: mean}, "entropy": {type: mean}}}``.
    Means are over soft steps of that type; absent when there were none."""
    eval_dir = Path(eval_dir)
    paths = path_rows(rows)
    results = {(r["question_index"], r["sample"]): r for r in read_results(eval_dir / "samples.jsonl")}
    cell_id = {}
    acc: dict[int, dict[str, list]] = defaultdict(lambda: defaultdict(list))
    for key, steps in read_steps(eval_dir / "steps.jsonl").items():
        r = results.get(key[1:])
        row = paths.get(r["question_id"]) if r else None
        if row is None:
            continue
        m = len(row["branches"])
        a = acc[m]
        words = [tokenizer.decode([int(t)]).strip() for t in steps["token"]]
        t_star, true = int(row["t_star"]), int(row["true_branch"])
        w = None
        if "topk_ids" in steps:
            w = record_weights(torch.from_numpy(steps["scores"].astype(np.float64)),
                               torch.from_numpy(steps["tau"].astype(np.float64)),
                               torch.from_numpy(steps["soft"])).numpy()
        for j, (kind, s) in enumerate(step_types(words, t_star)):
            if steps["soft"][j]:
                a[f"tau:{kind}"].append(float(steps["tau"][j]))
                a[f"entropy:{kind}"].append(float(steps["entropy"][j]))
            if kind != "branch":
                continue
            a["branch_steps"].append(1)
            if not steps["soft"][j] or w is None:
                continue
            live = [b["cells"][s - 1] for b in row["branches"]]
            for c in live:
                if c not in cell_id:
                    ids = tokenizer.encode(" " + c, add_special_tokens=False)
                    cell_id[c] = ids[0] if len(ids) == 1 else -1
            ids = steps["topk_ids"][j]
            wj = w[j]
            live_ids = {cell_id[c] for c in live}
            true_w = float(wj[ids == cell_id[live[true]]].sum())
            a["top_weight"].append(float(wj.max()))
            a["eff_k"].append(float(1.0 / (wj ** 2).sum()))
            a["live_mass"].append(float(sum(x for i, x in zip(ids, wj) if i in live_ids)))
            a["true_weight"].append(true_w)
            a[f"survive:{s}"].append(float(true_w >= SURVIVAL_WEIGHT))
    out = {}
    for m, a in sorted(acc.items()):
        mean = {k: float(np.mean(v)) for k, v in a.items() if v and not k.startswith("survive")}
        out[m] = {"branch_steps": len(a["branch_steps"]), "soft_branch_steps": len(a["true_weight"]),
                  **{k: mean[k] for k in ("top_weight", "eff_k", "live_mass", "true_weight")
                     if k in mean},
                  "survival": {int(k.split(":")[1]): float(np.mean(v)) for k, v in sorted(
                      a.items()) if k.startswith("survive:") and v},
                  "tau": {t: mean[f"tau:{t}"] for t in STEP_TYPES if f"tau:{t}" in mean},
                  "entropy": {t: mean[f"entropy:{t}"] for t in STEP_TYPES
                              if f"entropy:{t}" in mean}}
    return out


def accuracy_by(samples_jsonl: str | Path, rows: Mapping[str, dict]) -> dict[str, dict]:
    """Accuracy % by m and by (m, t*): ``{"m": {m: %}, "t_star": {"m,t": %}}``."""
    by_m, by_t = defaultdict(list), defaultdict(list)
    paths = path_rows(rows)
    for r in read_results(Path(samples_jsonl)):
        row = paths.get(r["question_id"])
        if row is None:
            continue
        m, ok = len(row["branches"]), float(bool(r["correct"]))
        by_m[m].append(ok)
        by_t[f"{m},{row['t_star']}"].append(ok)
    return {"m": {m: 100 * float(np.mean(v)) for m, v in sorted(by_m.items())},
            "t_star": {k: 100 * float(np.mean(v)) for k, v in sorted(by_t.items())}}


def readout_table(readouts: Mapping[str, dict]) -> str:
    """Markdown: one row per (evaluation, m) with the branch-step readouts and τ by step type."""
    lines = ["| evaluation | m | soft branch steps | top w | eff. K | live mass | true w | "
             "survival (s = 1..) | τ branch / move / tracked |", "|---|---|---|---|---|---|---|---|---|"]
    for name, per in readouts.items():
        for m, r in per.items():
            if not r["soft_branch_steps"]:
                continue
            surv = " ".join(f"{v:.2f}" for _, v in sorted(r["survival"].items()))
            tau = " / ".join(f"{r['tau'][t]:.2f}" if t in r["tau"] else "-"
                             for t in ("branch", "move", "tracked"))
            lines.append(f"| {name} | {m} | {r['soft_branch_steps']} | {r['top_weight']:.3f} | "
                         f"{r['eff_k']:.2f} | {r['live_mass']:.3f} | {r['true_weight']:.3f} | "
                         f"{surv} | {tau} |")
    return "\n".join(lines) + "\n"


def t_star_table(by_t_star: Mapping[str, Mapping[str, float]]) -> str:
    """Markdown: one row per evaluation of :func:`accuracy_by`'s ``t_star`` accuracies."""
    cols = list(next(iter(by_t_star.values())))
    return ("| evaluation | " + " | ".join(cols) + " |\n|---|" + "---|" * len(cols) + "\n"
            + "".join(f"| {n} | " + " | ".join(f"{v:.1f}" for v in acc.values()) + " |\n"
                      for n, acc in by_t_star.items()))
