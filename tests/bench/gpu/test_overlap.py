"""X/overlap-parity's comparison (soft_spatial_bench/gpu/overlap.py): the first difference between
two runs' records by row, step and field, and its size, and the job's verdict over engines that
decode alike or not (the plugin's own records under overlap, on SGLang's real engine on the CPU:
tests/sglang_real/test_real_engine_overlap.py)."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from soft_spatial_bench.gpu import overlap
from soft_spatial_bench.gpu.report import JobFailed


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
    v = overlap.OverlapResult({"adaptsoft": {"batch": ["exact", "exact"],
                                             "alone": ["Δtau 1e-07; first: x", "exact"]}},
                              [], [4, 2, 32], True)
    text = "\n".join(overlap.render(v))
    assert "| adaptsoft | exact | exact | Δtau 1e-07; first: x | exact |" in text
    assert "or differs beyond it" in text and "CUDA graphs on" in text


class _Engine:
    """An engine of X/overlap-parity's: each row's records follow from its prompt, sample and
    seed; ``change`` alters what the overlap-on side decodes (a token: the path; τ: a value)."""

    def __init__(self, args: dict, change: str | None, log: list):
        self.overlap = not args["disable_overlap_schedule"]
        self.change = change if self.overlap else None
        self.args, self.backend = args, SimpleNamespace(flush_cache=lambda: None)
        log.append(self)
        self.closed = False

    def generate(self, prompts, soft_thinking, sampling, n=1, seed=0):
        rows = []
        for i, p in enumerate(prompts):
            for j in range(n):
                t = 10 * seed + 3 * i + j + len(p)
                tokens = [t % 7, (t + 1) % 7]
                tau = [0.5, 0.25 if self.change == "tau" else 0.5]
                if self.change == "token":
                    tokens[1] += 1
                rows.append(_completion(tokens, [[tokens[0], 6], [tokens[1], 6]],
                                        [[0.5, 0.1], [0.2, 0.3]], tau, [True, False],
                                        [-0.1, -0.2]))
        return rows

    def close(self):
        self.closed = True


@pytest.mark.parametrize("change, dry, bad", [(None, True, []), ("tau", True, []),
                                              ("tau", False, ["adaptsoft (batch)", "adaptsoft (alone)"]),
                                              ("token", True, ["adaptsoft (batch)", "adaptsoft (alone)"])])
def test_the_job_fails_where_overlap_leaves_the_controls_path(monkeypatch, tmp_path, change, dry,
                                                              bad):
    """Overlap off, off again (the control) and on, batched and alone: equal records pass; a
    changed token fails in a dry run too; a changed value only on a GPU, where the control is
    exact (on a CPU the values' rounding is not the device's). Both engines closed, overlap as
    named, the radix cache off on both."""
    import transformers
    engines: list = []
    monkeypatch.setattr(overlap, "shared_model", lambda ctx: (tmp_path, tmp_path / "c.pt", {}))
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", lambda model: None)
    monkeypatch.setattr(overlap, "text_prompts", lambda tok, n, words: [[1] * (k + 2) for k in range(n)])
    monkeypatch.setattr(overlap, "plugin_engine",
                        lambda model, mode, ctrl, args: _Engine(args, change, engines))
    job = SimpleNamespace(args={"modes": ["adaptsoft"]})
    ctx = SimpleNamespace(dry_run=dry)
    if bad:
        with pytest.raises(JobFailed) as failed:
            overlap.measure(ctx, job)
        result = failed.value.result
    else:
        result = overlap.measure(ctx, job)
    assert result.bad == bad
    assert [e.overlap for e in engines] == [False, True] and all(e.closed for e in engines)
    assert all(e.args["disable_radix_cache"] for e in engines)
    control = result.rows["adaptsoft"]["batch"][1]
    assert control == "exact" and (result.rows["adaptsoft"]["batch"][0] == "exact") == (change is None)
