"""Phase 0 of the softness experiment: the gates measured on the warm starts before any GRPO.

The rules are registered in ``docs/learning.md`` ("The softness experiment: the decision, written
before the runs"); :class:`GateRules` holds their numbers once. The inputs are evaluation
directories (``python -m soft_spatial.eval``'s ``samples.jsonl``) of the warm starts on the path
questions' test split and that split's records (their ``branches``, ``true_branch``, ``t_star``):

* **G1 tracking** — the two-view warm start decoded hard, accuracy on m = 1 within [75, 90];
* **G2 capability** — the same warm start decoded at fixed τ = 0.9 minus decoded hard, m = 2, ≥ +5;
* **G3 necessity** — the no-chain warm start ≤ 35 on m ≥ 2 and ≥ 20 below the chain one on m = 1;
* **G4 no lookahead** — the hard first guess (the first position word is the true start's first
  cell) ≤ 100/m + 5 on m = 2 and m = 3;
* **G5 fairness** — two-view minus hard-only warm start, both decoded hard, m = 1, within ±3.
"""
from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

from soft_spatial.data.synthetic import PATH_CANDIDATES
from soft_spatial.eval.runner import read_results
from soft_spatial.lab.softness.branches import path_rows, readout_table, t_star_table

__all__ = ["GateRules", "Gate", "path_accuracy", "first_guess", "measure_gates", "gate_table",
           "GATE_EVALS"]

#: the evaluations the gates read: name -> (warm start view, decoding mode, fixed τ or None)
GATE_EVALS = {
    "mix_hard": ("mix", "hard", None),
    "mix_fixed_0.1": ("mix", "fixed", 0.1),
    "mix_fixed_0.5": ("mix", "fixed", 0.5),
    "mix_fixed_0.9": ("mix", "fixed", 0.9),
    "hard_hard": ("hard", "hard", None),
    "nochain_hard": ("nochain", "hard", None),
}


@dataclass(frozen=True)
class GateRules:
    """The registered pass conditions (docs/learning.md), in accuracy points."""

    g1_range: tuple[float, float] = (75.0, 90.0)
    """G1: the two-view warm start's hard accuracy on m = 1 lies in this range."""
    g2_min_gain: float = 5.0
    """G2: fixed τ = 0.9 minus hard on m = 2, at least this."""
    g3_max: float = 35.0
    """G3: the no-chain warm start on m ≥ 2, at most this (chance 25)."""
    g3_min_gap: float = 20.0
    """G3: the chain warm start minus the no-chain one on m = 1, at least this."""
    g4_slack: float = 5.0
    """G4: the hard first guess at most 100/m + this."""
    g5_tolerance: float = 3.0
    """G5: |two-view − hard-only| on m = 1, hard decoding, at most this."""


@dataclass(frozen=True)
class Gate:
    name: str
    measured: str
    rule: str
    passed: bool


def path_accuracy(samples_jsonl: str | Path, rows: Mapping[str, dict]) -> dict[int, float]:
    """``{m: accuracy %}`` over every (question, sample) of the path questions, plus key 0 for
    the ambiguous items (m ≥ 2) together."""
    hits: dict[int, list[float]] = defaultdict(list)
    paths = path_rows(rows)
    for r in read_results(Path(samples_jsonl)):
        row = paths.get(r["question_id"])
        if row is None:
            continue
        m = PATH_CANDIDATES[row["synthetic_task"]]
        hits[m].append(float(bool(r["correct"])))
        if m > 1:
            hits[0].append(float(bool(r["correct"])))
    return {m: 100.0 * sum(v) / len(v) for m, v in sorted(hits.items())}


def first_guess(samples_jsonl: str | Path, rows: Mapping[str, dict]) -> dict[int, dict]:
    """The hard chain's first position word against the candidates' first cells, per m:
    ``{"true": % of samples naming the true start's cell, "valid": % naming any candidate's}``."""
    out: dict[int, list[tuple[bool, bool]]] = defaultdict(list)
    paths = path_rows(rows)
    for r in read_results(Path(samples_jsonl)):
        row = paths.get(r["question_id"])
        if row is None:
            continue
        words = r["text"].split()
        guess = words[1] if len(words) > 1 else None
        firsts = [b["cells"][0] for b in row["branches"]]
        out[len(firsts)].append((guess == firsts[row["true_branch"]], guess in firsts))
    return {m: {"true": 100.0 * sum(t for t, _ in v) / len(v),
                "valid": 100.0 * sum(x for _, x in v) / len(v), "n": len(v)}
            for m, v in sorted(out.items())}


def measure_gates(evals: Mapping[str, str | Path], rows: Mapping[str, dict],
                  rules: GateRules = GateRules()) -> dict:
    """The five gates from the evaluations named as in :data:`GATE_EVALS` (each a directory with
    ``samples.jsonl``). Returns ``{"gates": [Gate...] as dicts, "passed", "accuracy": {eval:
    {m: %}}, "first_guess": {m: ...}}``."""
    acc = {name: path_accuracy(Path(d) / "samples.jsonl", rows) for name, d in evals.items()}
    guess = first_guess(Path(evals["mix_hard"]) / "samples.jsonl", rows)
    mix, hard, nochain = acc["mix_hard"], acc["hard_hard"], acc["nochain_hard"]
    lo, hi = rules.g1_range
    gain = acc["mix_fixed_0.9"][2] - mix[2]
    gap = mix[1] - nochain[1]
    diff = mix[1] - hard[1]
    g4 = {m: v["true"] for m, v in guess.items() if m > 1}
    gates = [
        Gate("G1 tracking", f"{mix[1]:.1f}", f"{lo:g} <= m=1 hard accuracy <= {hi:g}",
             lo <= mix[1] <= hi),
        Gate("G2 capability", f"{gain:+.1f} ({acc['mix_fixed_0.9'][2]:.1f} - {mix[2]:.1f})",
             f"fixed 0.9 - hard on m=2 >= +{rules.g2_min_gain:g}", gain >= rules.g2_min_gain),
        Gate("G3 necessity", f"m>=2 {nochain[0]:.1f}; m=1 gap {gap:+.1f}",
             f"no-chain <= {rules.g3_max:g} on m>=2 and >= {rules.g3_min_gap:g} below the chain "
             f"on m=1", nochain[0] <= rules.g3_max and gap >= rules.g3_min_gap),
        Gate("G4 no lookahead", "; ".join(f"m={m} {v:.1f}" for m, v in g4.items()),
             f"first guess <= 100/m + {rules.g4_slack:g}",
             all(v <= 100.0 / m + rules.g4_slack for m, v in g4.items())),
        Gate("G5 fairness", f"{diff:+.1f} ({mix[1]:.1f} - {hard[1]:.1f})",
             f"|two-view - hard-only| on m=1 <= {rules.g5_tolerance:g}",
             abs(diff) <= rules.g5_tolerance),
    ]
    return {"gates": [asdict(g) for g in gates], "passed": all(g.passed for g in gates),
            "accuracy": acc, "first_guess": guess, "rules": asdict(rules)}


def gate_table(result: dict) -> str:
    """The gates and the per-m accuracies as markdown; with ``branches`` and ``by_t_star`` in
    ``result`` (what :meth:`soft_spatial.lab.softness.phase0.Phase0Gates.run` adds), their tables too."""
    lines = ["| gate | measured | passes when | result |", "|---|---|---|---|"]
    lines += [f"| {g['name']} | {g['measured']} | {g['rule']} | "
              f"{'pass' if g['passed'] else 'FAIL'} |" for g in result["gates"]]
    lines += ["", "| evaluation | m = 1 | m = 2 | m = 3 | m >= 2 |", "|---|---|---|---|---|"]
    for name, acc in result["accuracy"].items():
        lines.append(f"| {name} | " + " | ".join(
            f"{acc[m]:.1f}" if m in acc else "-" for m in (1, 2, 3, 0)) + " |")
    lines += ["", "Hard first guess (two-view warm start decoded hard): " + "; ".join(
        f"m={m}: true start {v['true']:.1f}%, a candidate's cell {v['valid']:.1f}% (n={v['n']})"
        for m, v in result["first_guess"].items()) + "."]
    text = "\n".join(lines) + "\n"
    if result.get("branches"):
        text += ("\nThe two-view warm start's soft decodes at the branch steps (position words "
                 "of steps s <= t*; lab/softness/branches.py):\n\n" + readout_table(result["branches"]))
    if result.get("by_t_star"):
        text += "\nAccuracy by (m, t*):\n\n" + t_star_table(result["by_t_star"])
    return text


def write_gates(out: Path, result: dict) -> None:
    (out / "gates.json").write_text(json.dumps(result, indent=2))
    (out / "gates.md").write_text(gate_table(result))
