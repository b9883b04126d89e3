"""Stage 0's measurements (soft_spatial/lab/softness/stage0.py) against hand-built inputs, and the whole
command at a tiny size (a random tiny model standing in for the warm start, its gate evaluations
written by hand): the numbers it reports are the ones its files hold."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from soft_spatial.data.synthetic import read_rows
from soft_spatial.eval.runner import read_results
from soft_spatial.lab.softness.stage0 import (DECODES, Stage0Config, additive_code, bootstrap_did, bootstrap_diff,
                                     bump_accuracy_free, decide, evaluations, never_closed, run)


def test_an_additive_code_fits_and_a_random_one_does_not():
    rng = np.random.default_rng(0)
    col, row = rng.normal(size=(6, 16)), rng.normal(size=(6, 16))
    additive = np.stack([col[i % 6] + row[i // 6] for i in range(36)])
    fit = additive_code(additive, permutations=200)
    assert fit["r2"] == pytest.approx(1.0) and fit["perm_p95"] < 0.9 and fit["p"] < 0.01
    noise = additive_code(rng.normal(size=(36, 16)), permutations=200)
    # 11 free directions of 35 centred ones: R² ≈ 10/35 for any assignment
    assert abs(noise["r2"] - noise["perm_mean"]) < 0.1 and noise["p"] > 0.05
    assert 0.2 < noise["perm_mean"] < 0.4


def _row(cells, true_start="a1", t_star=3):
    return {"branches": [{"start": true_start, "cells": cells}], "true_branch": 0, "t_star": t_star}


def test_bump_accuracy_along_a_chain_stops_at_its_first_wrong_cell():
    # a1 -> north stays a1 (bump), east b1, east c1, south c2
    rows = {"q": _row(["a1", "b1", "c1", "c2"])}
    samples = [
        {"question_id": "q", "text": "north a1 east b1 east c1 circle south c2 : c2 northwest"},
        {"question_id": "q", "text": "north b1 east c1 east d1 south d2 : d2 northeast"},  # wrong at once
        {"question_id": "q", "text": "north a1 east b2 east c1 south c2 : c2 northwest"},  # wrong at 2
    ]
    got = bump_accuracy_free(samples, rows)
    # bump steps: s = 1 in every sample (right, wrong, right); plain: 3 right + 1 wrong (then stop)
    assert got["bump"] == {"accuracy": pytest.approx(200 / 3), "n": 3}
    assert got["plain"] == {"accuracy": pytest.approx(75.0), "n": 4}


def test_the_paired_bootstrap_the_rule_and_never_closed():
    a = {f"q{i}": 1.0 for i in range(50)}
    b = {f"q{i}": float(i % 2) for i in range(50)}
    d = bootstrap_diff(a, b)
    assert d["diff"] == pytest.approx(50.0) and d["n"] == 50 and d["lo"] < 50 < d["hi"]
    assert bootstrap_diff(a, a) == {"diff": 0.0, "lo": 0.0, "hi": 0.0, "n": 50}
    did = bootstrap_did(b, b, a, b)  # m = 1: no difference; m = 2: +50
    assert did["diff"] == pytest.approx(50.0) and did["lo"] < 50 < did["hi"]
    assert bootstrap_did(a, b, a, b)["diff"] == pytest.approx(0.0)
    assert decide(10.0, 10.0)["stage1"] and not decide(9.99, 10.0)["stage1"]
    assert "the line closes" in decide(3.0, 10.0)["verdict"]
    assert never_closed([{"think_closed": True, "text": "a1 </think> A"},
                         {"think_closed": False, "text": "a1 b2 c3"}]) == 50.0


def test_never_closed_reads_the_text_for_the_engines_hard_samples_say_nothing():
    """The engine records where the think block closed only in soft modes: a hard sample's
    ``think_closed`` is False even when its text closes the block (found on the first Stage-0
    run: 100% "never closed" for every hard evaluation, 0.04% by the text)."""
    hard = [{"think_closed": False, "text": "north a1 : a1 northwest\n</think>\n\nA"}] * 3
    assert never_closed(hard + [{"think_closed": False, "text": "north a1 north"}]) == 25.0


def _fake_eval(path, rows, right):
    """An evaluation directory whose samples are right on the questions in ``right``."""
    path.mkdir(parents=True)
    lines = []
    for i, (qid, row) in enumerate(rows.items()):
        words = ["north", row["branches"][row["true_branch"]]["cells"][0], ":"]
        for j in range(2):
            lines.append({"question_id": qid, "question_index": i, "sample": j,
                          "correct": qid in right, "think_closed": False,
                          "text": " ".join(words) + ("\n</think>\n\nA" if j == 0 else "")})
    (path / "samples.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


def test_the_command_at_a_tiny_size_reports_what_its_files_hold(seed_dir, tmp_path):
    rows = read_rows(seed_dir / "data" / "OmniSpatial-test")
    two = [q for q, r in rows.items() if len(r["branches"]) == 2]
    names = ["gate_mix_hard", "gate_mix_fixed_0.9", "stage0_T0.6_mix_hard", "stage0_T0.6_mix_fixed_0.9"]
    evals = {n: _fake_eval(tmp_path / n, rows, set(two[:1]) if n == "gate_mix_hard" else set())
             for n in names}
    cfg = Stage0Config(str(seed_dir), samples=2, max_new_tokens=10, limit=1, permutations=10)
    result = run(cfg, evals, say=lambda *_: None)
    out = seed_dir / "stage0"
    assert json.loads((out / "stage0.json").read_text())["decision"] == result["decision"]
    assert "Δ₀ = oracle mixture − hard on m = 2" in (out / "stage0.md").read_text()
    mix = read_results(out / "samples_oracle_mixture.jsonl")
    assert sorted({r["m"] for r in mix}) == [1, 2, 3] and len(mix) == 3 * 2
    assert len(read_results(out / "samples_oracle_guess.jsonl")) == 2 * 2
    # Δ₀ over the m = 2 questions both hold (the decode's one, limit=1)
    q2 = {r["question_id"] for r in mix if r["m"] == 2}
    want = 100 * (np.mean([r["correct"] for r in mix if r["m"] == 2])
                  - np.mean([q in two[:1] for q in q2]))
    assert result["delta"]["diff"] == pytest.approx(want) and result["delta"]["n"] == len(q2)
    assert result["regenerated_gates"]["G1"] == 0.0 and result["never_closed"]["gate_mix_hard"] == 50.0
    assert set(result["additive_code"]) == {"input", "output"}
    assert result["bump_accuracy"]["teacher_forced"]  # one m = 1 question, teacher-forced
    # a re-run resumes: no question decoded twice
    before = {n: (out / f"samples_{n}.jsonl").read_text() for n in DECODES}
    run(cfg, evals, say=lambda *_: None)
    assert {n: (out / f"samples_{n}.jsonl").read_text() for n in DECODES} == before
    shutil.rmtree(out)


def test_a_missing_warm_start_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="models/warmstart/model.safetensors"):
        (tmp_path / "data" / "OmniSpatial-test").mkdir(parents=True)
        (tmp_path / "data" / "OmniSpatial-test" / "data.json").write_text("[]")
        run(Stage0Config(str(tmp_path)), evals={})


def test_the_evaluations_are_lab_learns_gate_evaluations_and_d_at_t_0_6(tmp_path, monkeypatch):
    from soft_spatial.lab.learning import experiment as learn

    calls = []

    def fake(self, name, model, mode, controller=None, extra=()):
        calls.append((name, model.name, mode, list(extra), self.cfg.eval.temperature,
                      self.cfg.eval.samples, self.cfg.eval.max_new_tokens))
        return self.out / "eval" / name

    monkeypatch.setattr(learn.Experiment, "evaluate", fake)
    out = evaluations(Stage0Config(str(tmp_path / "seed0")))
    assert calls == [
        ("gate_mix_hard", "warmstart", "hard", [], 1.0, 8, 48),
        ("gate_mix_fixed_0.9", "warmstart", "fixed", ["soft_thinking.fixed_tau=0.9"], 1.0, 8, 48),
        ("stage0_T0.6_mix_hard", "warmstart", "hard", [], 0.6, 8, 48),
        ("stage0_T0.6_mix_fixed_0.9", "warmstart", "fixed", ["soft_thinking.fixed_tau=0.9"], 0.6, 8, 48)]
    assert out["gate_mix_hard"] == tmp_path / "seed0" / "eval" / "gate_mix_hard"
