"""The path traces' mechanism readouts (soft_spatial/lab/softness/branches.py) on evaluation files written
here through eval's own writer, with mixture weights chosen so every readout is known by hand."""
from __future__ import annotations

import json
import math
from types import SimpleNamespace

import pytest
import torch

from soft_spatial.eval.steps import steps_row
from soft_spatial.lab.softness.branches import accuracy_by, branch_readouts, step_types


class WordTokenizer:
    """One id per word (cells encode after a space, as the path BPE's added tokens do)."""

    def __init__(self, words):
        self.words = list(dict.fromkeys(words))

    def decode(self, ids):
        return " ".join(self.words[i] for i in ids)

    def encode(self, text, add_special_tokens=False):
        return [self.words.index(text.strip())]


ROW = {"id": "0_0", "synthetic_task": "path_two", "true_branch": 1, "t_star": 2,
       "branches": [{"cells": ["a1", "a2", "a3"]}, {"cells": ["c1", "c2", "c3"]}]}
WORDS = ["east", "c1", "south", "c2", "circle", "south", "c3", ":", "c3", "northwest", "</think>"]
VOCAB = WORDS + ["a1", "a2", "a3", "f5", "f6", "e5"]


def test_each_word_gets_its_step_type():
    assert step_types(WORDS, t_star=2) == [
        ("move", 1), ("branch", 1), ("move", 2), ("branch", 2), ("circle", 2), ("move", 3),
        ("tracked", 3), ("answer", 3), ("answer", 3), ("answer", 3), ("other", 3)]


def _trace(tok, weights_at_branch, tau=0.7):
    """Soft at every step before ``:``; at branch steps the candidates (spine first) with z chosen
    so that softmax(z/τ) is the given weights; elsewhere one-hot-ish z."""
    n, k = len(WORDS), 5
    ids = torch.zeros(n, k, dtype=torch.long)
    z = torch.zeros(n, k)
    for j, w in enumerate(WORDS):
        ids[j, 0] = tok.encode(w)[0]
        ids[j, 1:] = torch.tensor([tok.encode(x)[0] for x in ("f5", "f6", "e5", "a3")])
        z[j] = torch.tensor([0.0, -20.0, -20.0, -20.0, -20.0])
    for j, (cands, w) in weights_at_branch.items():
        ids[j] = torch.tensor([tok.encode(c)[0] for c in cands])
        z[j] = tau * torch.log(torch.tensor(w, dtype=torch.float64)).float()
    soft = torch.tensor([j < 7 for j in range(n)])
    return SimpleNamespace(soft=soft, tau=torch.where(soft, tau, 0.0), entropy=torch.full((n,), 0.3),
                           tokens=ids[:, 0].int(), topk_ids=ids, scores=z)


def test_branch_readouts_match_the_weights_written(tmp_path):
    tok = WordTokenizer(VOCAB)
    w1 = [0.6, 0.3, 0.05, 0.03, 0.02]  # step 1: true c1 first, live a1 second
    w2 = [0.9, 0.04, 0.03, 0.02, 0.01]  # step 2: spine c2 (true), a2 at 0.04 -> lost below 0.05
    branch = {1: (["c1", "a1", "f5", "f6", "e5"], w1), 3: (["c2", "f5", "a2", "f6", "e5"],
                                                          [0.9, 0.03, 0.04, 0.02, 0.01])}
    trace = _trace(tok, branch)
    (tmp_path / "steps.jsonl").write_text(json.dumps(steps_row("omnispatial", 0, 0, trace)) + "\n")
    (tmp_path / "samples.jsonl").write_text(json.dumps(
        {"benchmark": "omnispatial", "question_key": "k", "question_id": "0_0", "question_index": 0,
         "sample": 0, "correct": True, "text": " ".join(WORDS)}) + "\n")
    out = branch_readouts(tmp_path, {"0_0": ROW}, tok)[2]
    w2 = [0.9, 0.03, 0.04, 0.02, 0.01]
    assert out["branch_steps"] == out["soft_branch_steps"] == 2
    assert out["top_weight"] == pytest.approx((0.6 + 0.9) / 2, abs=1e-5)
    assert out["eff_k"] == pytest.approx((1 / sum(x * x for x in w1) + 1 / sum(x * x for x in w2)) / 2,
                                         rel=1e-5)
    assert out["live_mass"] == pytest.approx((0.9 + 0.94) / 2, abs=1e-5)
    assert out["true_weight"] == pytest.approx((0.6 + 0.9) / 2, abs=1e-5)
    assert out["survival"] == {1: 1.0, 2: 1.0}  # the true cell's weight, not the other's
    assert out["tau"]["branch"] == pytest.approx(0.7) and "answer" not in out["tau"]
    # the true branch as a low-weight candidate: survival falls at that step
    branch[3] = (["a2", "f5", "c2", "f6", "e5"], [0.9, 0.04, 0.04, 0.01, 0.01])
    (tmp_path / "steps.jsonl").write_text(json.dumps(steps_row(
        "omnispatial", 0, 0, _trace(tok, branch))) + "\n")
    out = branch_readouts(tmp_path, {"0_0": ROW}, tok)[2]
    assert out["survival"] == {1: 1.0, 2: 0.0}
    assert out["true_weight"] == pytest.approx((0.6 + 0.04) / 2, abs=1e-5)


def test_accuracy_by_m_and_t_star(tmp_path):
    rows = {f"{i}_0": {**ROW, "id": f"{i}_0", "t_star": 3 + i % 2} for i in range(4)}
    rows["9_0"] = {"id": "9_0", "synthetic_task": "path_known", "t_star": 5, "true_branch": 0,
                   "branches": [{"cells": ["a1"]}]}
    lines = [{"question_id": q, "question_index": i, "sample": s, "correct": (i + s) % 2 == 0}
             for i, q in enumerate(rows) for s in range(2)]
    (tmp_path / "samples.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    acc = accuracy_by(tmp_path / "samples.jsonl", rows)
    assert acc["m"] == {1: 50.0, 2: 50.0}
    assert acc["t_star"] == {"1,5": 50.0, "2,3": 50.0, "2,4": 50.0}
    assert not math.isnan(acc["m"][2])
