"""A decode step's host work, through SGLang 0.5.12's real ``Sampler`` classes and the plugin's
real hook (soft_spatial_bench/sampler.py, what scripts/bench_sampler.py measures): no pass over
the batch's rows in the plugin's step (the lines of soft_spatial it runs are the same at 8 and 64
rows), one copy of the records to the host and one ``customized_info`` key per step, no host value
turned into a tensor, and at most 10 ops outside the captured sampler on its graphed path. Counts
only: the time per step is the bench's output, never asserted."""
from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.sglang


@pytest.fixture(autouse=True)
def _own_runtime():
    """The harness installs its runtimes process-wide; the module leaves none behind."""
    from soft_spatial.engines.sglang import hooks
    before = hooks._runtime
    yield
    hooks.set_runtime(before)


@pytest.fixture(scope="module")
def shape(tiny_qwen3_vl_small):
    from transformers import AutoConfig, AutoTokenizer

    from soft_spatial_bench.sampler import sglang_setup
    from soft_spatial.models import think_end_id
    sglang_setup(str(tiny_qwen3_vl_small))
    cfg = AutoConfig.from_pretrained(tiny_qwen3_vl_small).text_config
    return cfg.vocab_size, cfg.hidden_size, think_end_id(
        AutoTokenizer.from_pretrained(tiny_qwen3_vl_small))


@pytest.mark.parametrize("impl", ["hard", "fixed", "adaptsoft"])
def test_a_decode_step_does_no_host_work_per_row(shape, impl):
    from soft_spatial_bench.sampler import count_step
    vocab, hidden, think_end = shape
    small, big = (count_step(impl, n, vocab, hidden, think_end) for n in (8, 64))
    assert small.lines == big.lines > 0, (small, big)  # nothing of ours loops over the rows
    for r in (small, big):
        assert (r.info_keys, r.d2h_copies, r.h2d_copies) == (1, 1, 0), r
        assert r.ops_outside_graph <= 10, r
    stock = count_step("stock", 8, vocab, hidden, think_end)
    assert stock.lines == 0 and stock.info_keys == 0  # the harness counts only the plugin's


def test_the_counter_sees_a_loop_over_the_rows(shape, monkeypatch):
    """The line count is what catches a pass over the rows: one put back into the sampler's
    step makes the counts at 8 and 64 rows differ."""
    from soft_spatial_bench.sampler import count_step
    from soft_spatial.engines.sglang import runtime as rt_mod
    original = rt_mod.SoftRuntime.sample

    def per_row(self, reqs, *a, **kw):
        for req in reqs:  # the kind of pass the decode path no longer makes: code of ours per row
            rt_mod._sampling_from_req(req, None)
        return original(self, reqs, *a, **kw)

    monkeypatch.setattr(rt_mod.SoftRuntime, "sample", per_row)
    vocab, hidden, think_end = shape
    small, big = (count_step("fixed", n, vocab, hidden, think_end) for n in (8, 64))
    assert big.lines > small.lines
    torch._dynamo.reset()
