"""Phase 0's gates (soft_spatial/lab/softness/gates.py): accuracies by m, the hard first guess and each
registered rule on evaluation files written here with known contents, boundaries included."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from soft_spatial.lab.softness.gates import (GATE_EVALS, GateRules, first_guess, gate_table, measure_gates,
                                    path_accuracy)

TASK = {1: "path_known", 2: "path_two", 3: "path_three"}


def _rows(n_per_m: int = 20) -> dict[str, dict]:
    rows = {}
    for m in (1, 2, 3):
        for q in range(n_per_m):
            qid = f"{m}{q:03d}_0"
            rows[qid] = {"id": qid, "synthetic_task": TASK[m], "true_branch": q % m,
                         "branches": [{"cells": [f"{'abc'[b]}{m}", "x", "y"]} for b in range(m)]}
    rows["scene_0"] = {"id": "scene_0", "synthetic_task": "counting"}  # not a path question
    return rows


def _write(d: Path, rows: dict, correct_per_m: dict[int, int], first_true: dict[int, int] = None,
           samples: int = 2) -> Path:
    """Each path question answered by ``samples`` samples; the first ``correct_per_m[m]`` questions
    of each m right, the first ``first_true[m]`` naming the true start's cell first."""
    d.mkdir(parents=True, exist_ok=True)
    lines = []
    seen = {1: 0, 2: 0, 3: 0}
    for qid, row in rows.items():
        if row["synthetic_task"] not in TASK.values():
            lines.append({"question_id": qid, "sample": 0, "correct": True, "text": "a b"})
            continue
        m = len(row["branches"])
        k = seen[m]
        seen[m] += 1
        cells = [b["cells"][0] for b in row["branches"]]
        true = cells[row["true_branch"]]
        other = cells[(row["true_branch"] + 1) % m] if m > 1 else "zz"
        guess = true if k < (first_true or {}).get(m, 0) else other
        for s in range(samples):
            lines.append({"question_id": qid, "question_index": len(lines), "sample": s,
                          "correct": k < correct_per_m[m], "text": f"east {guess} north x"})
    (d / "samples.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    return d


def test_accuracy_by_m_and_first_guess_count_path_questions_only(tmp_path):
    rows = _rows()
    d = _write(tmp_path / "e", rows, {1: 15, 2: 10, 3: 4}, {2: 11, 3: 7})
    acc = path_accuracy(d / "samples.jsonl", rows)
    assert acc == pytest.approx({0: 100 * 14 / 40, 1: 75.0, 2: 50.0, 3: 20.0})
    guess = first_guess(d / "samples.jsonl", rows)
    assert guess[2] == pytest.approx({"true": 55.0, "valid": 100.0, "n": 40})
    assert guess[3]["true"] == pytest.approx(35.0) and guess[1]["valid"] == 0.0


@pytest.mark.parametrize("case, passed", [
    ("all", {"G1 tracking": True, "G2 capability": True, "G3 necessity": True,
             "G4 no lookahead": True, "G5 fairness": True}),
    ("edges", {"G1 tracking": False, "G2 capability": False, "G3 necessity": False,
               "G4 no lookahead": False, "G5 fairness": False}),
])
def test_each_gate_applies_its_registered_rule(tmp_path, case, passed):
    rows = _rows()
    if case == "all":  # G1 80; G2 +10 on m=2; G3 no-chain 25 and gap 60; G4 50 / 30; G5 0
        spec = {"mix_hard": {1: 16, 2: 8, 3: 6}, "mix_fixed_0.9": {1: 16, 2: 10, 3: 6},
                "hard_hard": {1: 16, 2: 8, 3: 6}, "nochain_hard": {1: 4, 2: 5, 3: 5}}
        guesses = {2: 10, 3: 6}
    else:  # G1 95 (above); G2 +0; G3 m>=2 40; G4 m=2 60 > 55; G5 95 vs 75
        spec = {"mix_hard": {1: 19, 2: 8, 3: 6}, "mix_fixed_0.9": {1: 19, 2: 8, 3: 6},
                "hard_hard": {1: 15, 2: 8, 3: 6}, "nochain_hard": {1: 4, 2: 8, 3: 8}}
        guesses = {2: 12, 3: 6}
    evals = {}
    for name in GATE_EVALS:
        correct = spec.get(name, spec["mix_hard"])
        evals[name] = _write(tmp_path / name, rows, correct,
                             guesses if name == "mix_hard" else None)
    result = measure_gates(evals, rows)
    assert {g["name"]: g["passed"] for g in result["gates"]} == passed
    assert result["passed"] == all(passed.values())
    table = gate_table(result)
    assert table.count("FAIL") == sum(not v for v in passed.values())


def test_the_rules_are_the_registered_ones():
    """The numbers of docs/learning.md's gate table."""
    text = (Path(__file__).resolve().parents[3] / "docs" / "learning.md").read_text()
    r = GateRules()
    assert f"| {r.g1_range[0]:g} ≤ accuracy ≤ {r.g1_range[1]:g} |" in text
    assert f"| ≥ +{r.g2_min_gain:g} |" in text
    assert f"≤ {r.g3_max:g} on m ≥ 2, and ≥ {r.g3_min_gap:g} below" in text
    assert f"≤ 100/m + {r.g4_slack:g} |" in text and f"within ±{r.g5_tolerance:g} |" in text
