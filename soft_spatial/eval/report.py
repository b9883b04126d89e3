"""Aggregation of per-sample results into accuracies and paper-style Markdown tables.

Accuracy is micro (every sample of every question counts once), per category and overall; the
overall of MindCube excludes the `translation` setting, as its official protocol does. With
mean@k sampling each question contributes k samples, so the sample-weighted average over
categories equals the overall micro accuracy.

The OmniSpatial table has the layout of the paper's Table 1: the 10 sub-task types in the order
of OmniSpatial's taxonomy (Dynamic Reasoning, Spatial Interaction, Complex Logic, Perspective
Taking), then ``Avg.``, the sample-weighted average (= the micro overall). Other benchmarks list
their categories and ``Overall``: every category of the questions asked for, in their order, also
one whose questions were all skipped. A cell that averages over fewer questions than were asked
for (prompts skipped as too long) says so beside its number: ``62.50 (n=120 of 128; 8 skipped:
prompt too long)``, a category with none answered ``– (n=0 of 3; 3 skipped: prompt too long)``.
A skipped question has no rows: it is left out of every accuracy (not counted as wrong), and
the cell says how many were left out.
"""
from __future__ import annotations

from collections import OrderedDict, defaultdict
from collections.abc import Iterable, Mapping

from soft_spatial.data.omnispatial import TAXONOMY

__all__ = ["summarize", "markdown_table", "EXCLUDED_FROM_OVERALL", "TABLE_LAYOUT"]

EXCLUDED_FROM_OVERALL = {"mindcube": {"translation"}}


def _omnispatial_layout():
    return "subcategories", [s for subs in TAXONOMY.values() for s in subs], "Avg."


#: benchmark -> () -> (summary level, fixed column order, overall column name)
TABLE_LAYOUT = {"omnispatial": _omnispatial_layout}


def _acc(correct: int, total: int) -> float | None:
    return 100.0 * correct / total if total else None


def _group(v: list) -> dict:
    return {"accuracy": _acc(v[0], v[1]), "samples": v[1], "questions": len(v[2])}


def summarize(rows: Iterable[Mapping], benchmark: str) -> dict:
    """Accuracy per category (and subcategory), overall, no-answer and truncation rates, τ stats.

    ``rows`` are the per-sample JSONL records of one benchmark.
    """
    cats: dict[str, list] = OrderedDict()  # name -> [correct, samples, question keys]
    subs: dict[str, list] = OrderedDict()
    n = correct = no_answer = truncated = closed = 0
    questions = set()
    tau_means: list[float] = []
    excluded = EXCLUDED_FROM_OVERALL.get(benchmark, set())
    for r in rows:
        c = int(bool(r["correct"]))
        q = r.get("question_key", r.get("question_index"))
        for groups, name in ((cats, r["category"]), (subs, r.get("subcategory"))):
            if name:
                g = groups.setdefault(name, [0, 0, set()])
                g[0] += c
                g[1] += 1
                g[2].add(q)
        if r["category"] in excluded:
            continue
        n += 1
        correct += c
        no_answer += r["pred"] is None
        truncated += r["finish_reason"] == "length"
        closed += bool(r.get("think_closed"))
        questions.add(q)
        if r.get("tau_mean") is not None:
            tau_means.append(r["tau_mean"])
    return {
        "benchmark": benchmark,
        "samples": n,
        "questions": len(questions),
        "overall": _acc(correct, n),
        "categories": {k: _group(v) for k, v in cats.items()},
        "subcategories": {k: _group(v) for k, v in subs.items()},
        "no_answer_rate": _acc(no_answer, n),
        "truncation_rate": _acc(truncated, n),
        "think_closed_rate": _acc(closed, n),
        "tau_mean": sum(tau_means) / len(tau_means) if tau_means else None,
        "excluded_from_overall": sorted(excluded),
    }


def _fmt(v: float | None) -> str:
    return "–" if v is None else f"{v:.2f}"


def _coverage(answered: int, requested: int | None, skipped: int | None = None) -> str:
    """`` (n=answered of requested)`` when questions are missing; with ``skipped`` also why:
    ``; k skipped: prompt too long`` (and any others ``without results``)."""
    if requested is None or answered >= requested:
        return ""
    notes = [f"n={answered} of {requested}"]
    if skipped is not None:
        notes += [f"{skipped} skipped: prompt too long"] if skipped else []
        if requested - answered - skipped > 0:
            notes.append(f"{requested - answered - skipped} without results")
    return f" ({'; '.join(notes)})"


def markdown_table(summary: Mapping, label: str, published: Iterable[Mapping] = (),
                   samples_per_question: int = 1) -> str:
    """One benchmark's table: categories (OmniSpatial: the 10 sub-task types, see the module
    docstring) as columns, ours and the published rows beside it. With ``summary["requested"]``
    (`soft_spatial.eval.runner.requested_counts`) a cell short of questions says over how many of
    how many it averages, and how many of those were skipped (``skipped_<level>``); its categories
    are then those asked for, answered or not."""
    layout = TABLE_LAYOUT.get(summary["benchmark"])
    requested = summary.get("requested") or {}
    level, cats, overall = (layout() if layout else (
        "categories", list(dict.fromkeys([*requested.get("categories", {}),
                                          *summary["categories"]])), "Overall"))
    groups = summary[level]
    wanted = requested.get(level, {})
    skipped = requested.get(f"skipped_{level}")  # None: a summary that does not count them
    head = ["Model", *[c.replace("_", " ") for c in cats], overall]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    ours = [f"{label} (mean@{samples_per_question})"]
    for c in cats:
        g = groups.get(c, {})
        ours.append(_fmt(g.get("accuracy")) + _coverage(
            g.get("questions", 0), wanted.get(c), None if skipped is None else skipped.get(c, 0)))
    ours.append(_fmt(summary["overall"]) + _coverage(summary["questions"], requested.get("questions"),
                                                     requested.get("skipped_overlong")))
    lines.append("| " + " | ".join(ours) + " |")
    for row in published:
        pc = row.get("categories") or {}
        cells = [f"{row['model']} ({row['source']})"]
        cells += [_fmt(pc.get(c)) for c in cats]
        cells.append(_fmt(row.get("overall")))
        lines.append("| " + " | ".join(cells) + " |")
    extra = (f"\n\n{summary['questions']} questions, {summary['samples']} samples; no answer "
             f"{_fmt(summary['no_answer_rate'])}%, truncated {_fmt(summary['truncation_rate'])}%, "
             f"think closed {_fmt(summary['think_closed_rate'])}%")
    if summary["excluded_from_overall"]:
        extra += f"; overall excludes {', '.join(summary['excluded_from_overall'])}"
    if requested.get("skipped_categories"):
        extra += "; skipped (prompt too long): " + ", ".join(
            f"{c.replace('_', ' ')} {k}" for c, k in requested["skipped_categories"].items())
    if summary.get("left_out"):
        extra += (f"; {len(summary['left_out'])} question(s) left out by the loader (in none of the "
                  f"numbers; listed in summary.json, left_out)")
    return "\n".join(lines) + extra + "\n"


def group_rows(rows: Iterable[Mapping]) -> dict[str, list[Mapping]]:
    out: dict[str, list[Mapping]] = defaultdict(list)
    for r in rows:
        out[r["benchmark"]].append(r)
    return out
