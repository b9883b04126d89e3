"""What scripts/bench_sampler.py counts (soft_spatial_bench/sampler.py), checked on known work:
the ops dispatched, the copies a device would make (host data turned into tensors; non-blocking
copies to the host), a captured graph counted as one op with nothing inside it, the lines of
soft_spatial a step runs (so a loop over rows shows), and the host time outside the forward.
Through SGLang's real classes: tests/sglang_real/test_sampler_host_work.py."""
from __future__ import annotations

import torch

from soft_spatial_bench.sampler import IMPLS, ROWS, SamplerRow, StepCounter, host_outside_forward
from soft_spatial.softthink.noise import seed_tensor


def test_the_counter_counts_ops_and_copies():
    x = torch.randn(4, 3)
    with StepCounter() as c:
        y = x * 2 + 1                                       # 2 ops
        torch.tensor([1, 2])                                # host values: a copy on a device
        y.to("cpu", non_blocking=True, copy=True)           # the records' copy to the host
    assert (c.ops, c.h2d, c.d2h) == (4, 1, 1)


def test_a_graph_counts_as_one_op_with_nothing_inside():
    c = StepCounter()
    replay = c.graph(lambda: [torch.randn(3) * i for i in range(10)])
    with c:
        replay()
        torch.zeros(2)
    assert c.ops == 2 and not c.paused


def test_the_lines_of_the_package_show_a_loop_over_rows():
    """seed_tensor has a list comprehension over its seeds: its lines grow with them."""
    counts = []
    for n in (8, 64):
        with StepCounter() as c:
            seed_tensor(list(range(n)))
        counts.append(c.lines)
    assert counts[1] > counts[0] > 0


def test_the_rows_of_the_json_and_the_host_time_outside_the_forward():
    assert IMPLS == ("stock", "hard", "fixed", "adaptsoft") and ROWS == (8, 64)
    assert {"impl", "rows", "ops_outside_graph", "python_calls", "host_us", "d2h_copies",
            "info_keys", "engine_host_us"} <= set(SamplerRow.keys())
    step = {"schedule": 10.0, "run": 300.0, "forward": 200.0, "sample": 50.0, "process": 40.0}
    assert host_outside_forward(step) == 150.0
