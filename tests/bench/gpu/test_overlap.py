"""X/overlap-parity's comparison (soft_spatial/bench/gpu/overlap.py): the first difference between
two runs' records by row, step and field, and its size. The job itself runs in the plan's dry run
(tests/sglang_real/test_gpu_headline_dry_run.py)."""
from __future__ import annotations

from types import SimpleNamespace

import torch

from soft_spatial.bench.gpu import overlap


def _completion(tokens, ids, scores, tau, soft, logprobs):
    from soft_spatial.softthink import SoftTrace
    n = len(tokens)
    trace = SoftTrace(topk_ids=torch.tensor(ids), scores=torch.tensor(scores),
                      tau=torch.tensor(tau), u=torch.zeros(n), ctrl_x=torch.zeros(n, 1),
                      entropy=torch.zeros(n), soft=torch.tensor(soft))
    return SimpleNamespace(token_ids=tokens, trace=trace, logprobs=logprobs)


def test_first_difference_names_row_step_and_field():
    """Equal records: no difference; one changed τ: that row, step and field, and its size —
    also in the derived mixture weights; a changed token comes first within its step."""
    a = _completion([1, 2], [[1, 3], [2, 4]], [[0.5, 0.1], [0.2, 0.3]], [1.0, 0.5],
                    [True, False], [-0.1, -0.2])
    b = _completion([1, 2], [[1, 3], [2, 4]], [[0.5, 0.1], [0.2, 0.3]], [1.0, 0.5],
                    [True, False], [-0.1, -0.2])
    dev, first = overlap.first_difference([a, a], [a, b])
    assert first is None and set(dev.values()) == {0.0}
    assert overlap.summary(dev, first) == "exact"
    c = _completion([1, 2], [[1, 3], [2, 4]], [[0.5, 0.1], [0.2, 0.3]], [0.75, 0.5],
                    [True, False], [-0.1, -0.2])
    dev, first = overlap.first_difference([a, c], [a, b])
    assert first.startswith("row 1 step 0 field weights") and dev["tau"] == 0.25
    assert dev["weights"] > 0 and dev["token_ids"] == 0.0
    assert overlap.summary(dev, first).startswith("Δweights")
    d = _completion([1, 5], [[1, 3], [5, 4]], [[0.5, 0.1], [0.2, 0.3]], [1.0, 0.5],
                    [True, False], [-0.1, -0.2])
    assert overlap.first_difference([d], [a])[1].startswith("row 0 step 1 field token_ids")
    assert overlap.first_difference([a, a], [a])[1] == "2 rows vs 1"


def test_render_names_every_comparison():
    v = {"rows": {"adaptsoft": {"batch": ["exact", "exact"], "alone": ["Δtau 1e-07; first: x",
                                                                       "exact"]}},
         "bad": [], "shape": [4, 2, 32], "graphs": True}
    text = "\n".join(overlap.render(v))
    assert "| adaptsoft | exact | exact | Δtau 1e-07; first: x | exact |" in text
    assert "or differs beyond it" in text and "CUDA graphs on" in text
