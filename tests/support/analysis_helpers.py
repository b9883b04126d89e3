"""Helpers of the analysis tests (tests/lab/paper/analysis/; no tests here): an evaluation
directory whose traces have known τ, Ĥ and correctness, as ``python -m soft_spatial.eval`` writes
it (``samples.jsonl``, ``steps.jsonl``, ``summary.json``)."""
import json

import numpy as np
import torch

from soft_spatial.eval.steps import steps_row
from soft_spatial.softthink import SoftTrace


def make_trace(tau, entropy, tokens, n_soft):
    n = len(tau)
    ids = torch.zeros(n, 3, dtype=torch.long)
    ids[:, 0] = torch.as_tensor(tokens)
    soft = torch.arange(n) < n_soft
    return SoftTrace(ids, torch.zeros(n, 3), torch.as_tensor(tau) * soft, torch.zeros(n),
                     torch.zeros(n, 9), torch.as_tensor(entropy) * soft, soft)


def write_eval_dir(tmp_path, tiny_qwen3_vl_small):
    """An evaluation directory under ``tmp_path`` with 12 traces: τ falls with Ĥ plus noise; lengths
    6..50 (``summary.json`` names the model, for its tokenizer). Returns (the directory, per trace
    (τ and Ĥ of its soft steps in float64, whether it is correct))."""
    rng = np.random.default_rng(0)
    d = tmp_path / "eval"
    d.mkdir()
    samples, steps, truth = [], [], []
    for q in range(6):
        for s in range(2):
            n_soft = int(rng.integers(6, 50))
            n = n_soft + 3
            ent = rng.uniform(0, 1, n).astype(np.float32)
            tau = (0.7 - 0.4 * ent + 0.05 * rng.standard_normal(n)).astype(np.float32)
            tokens = rng.integers(0, 500, n)
            correct = (q + s) % 3 == 0
            tr = make_trace(tau, ent, tokens, n_soft)
            steps.append(steps_row("omnispatial", q, s, tr))
            samples.append({"benchmark": "omnispatial", "question_index": q, "sample": s,
                            "question_id": f"{q}_0", "category": "Perspective_Taking",
                            "subcategory": "Egocentric", "answer": "A",
                            "pred": "A" if correct else "B", "correct": correct,
                            "num_tokens": n, "soft_steps": n_soft, "text": "x"})
            truth.append((tau[:n_soft].astype(np.float64), ent[:n_soft].astype(np.float64),
                          correct))
    (d / "steps.jsonl").write_text("".join(json.dumps(r) + "\n" for r in steps))
    (d / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in samples))
    (d / "summary.json").write_text(json.dumps({"config": {"model": str(tiny_qwen3_vl_small)}}))
    return d, truth
