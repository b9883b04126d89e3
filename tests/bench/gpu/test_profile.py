"""The profile pass's summary (soft_spatial_bench/gpu/profile.py) and F's decoding window
(graphs.decode_window) on traces and logs whose answers are known by construction."""
from __future__ import annotations

import gzip
import json

import pytest

from soft_spatial_bench.gpu.graphs import decode_window
from soft_spatial_bench.gpu.profile import read_trace, summarize


def _x(name, ts, dur, cat="user_annotation", **args):
    return {"ph": "X", "name": name, "ts": ts, "dur": dur, "cat": cat, "args": args}


def _trace(steps: int, step_us: float = 1000.0):
    """``steps`` decode steps of ``step_us``: schedule 100, run 300 (forward 150, sample 100),
    process 200; per step one graph launch of 2 kernels (200 + 100 µs) and 3 kernels launched
    one by one (40 µs each); a prefill step before them that must not count."""
    ev = [_x("soft_spatial/run", -5000, 3000), _x("big_prefill_kernel", -4000, 2000,
                                                  "kernel", correlation=1)]
    corr = 10
    for i in range(steps):
        t = i * step_us
        ev += [_x("soft_spatial/schedule", t, 100), _x("soft_spatial/run/decode", t + 100, 300),
               _x("soft_spatial/forward/decode", t + 110, 150),
               _x("soft_spatial/sample/decode", t + 270, 100),
               _x("soft_spatial/process/decode", t + 400, 200)]
        ev.append(_x("cudaGraphLaunch", t + 120, 5, "cuda_runtime", correlation=corr))
        ev += [_x("gemm", t + 150, 200, "kernel", correlation=corr),
               _x("norm", t + 350, 100, "kernel", correlation=corr)]
        for j in range(3):
            c = corr + 1 + j
            ev.append(_x("cudaLaunchKernel", t + 280 + j, 3, "cuda_runtime", correlation=c))
            ev.append(_x(f"eager_op_{j}", t + 455 + 45 * j, 40, "kernel", correlation=c))
        corr += 10
    ev.append(_x("cpu_only_event", 0, 10, "cpu_op"))
    return {"traceEvents": ev + [{"ph": "i", "name": "marker", "ts": 0}]}


def test_the_summary_says_where_a_step_goes(tmp_path):
    s = summarize(_trace(20))
    assert s["steps"] == 20
    assert s["host_us"] == {"schedule": 100, "run": 300, "forward": 150, "sample": 100,
                            "process": 200}
    # the region: from the first decode run (t = 100) to the last process's end
    assert s["step_us"] == pytest.approx((19 * 1000 + 600 - 100) / 20)
    assert s["gpu_busy_us"] == pytest.approx(420)  # 200 + 100 + 3 x 40, no overlap
    assert s["gpu_idle_us"] == pytest.approx(s["step_us"] - 420)
    assert s["graph_launches"] == 1 and s["kernels_outside_graphs"] == 3
    assert s["outside_us"] == pytest.approx(120)
    top = {t["kernel"]: t for t in s["top"]}
    assert top["gemm"] == {"kernel": "gemm", "calls": 1, "us": 200, "in_graph": True}
    assert top["eager_op_0"]["in_graph"] is False and "big_prefill_kernel" not in top
    assert s["top"][0]["kernel"] == "gemm"
    path = tmp_path / "t.trace.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump(_trace(3), f)
    assert summarize(read_trace(path))["steps"] == 3
    assert summarize({"traceEvents": []}) == {"steps": 0}


def test_the_decode_window_counts_decode_steps_only(tmp_path):
    """F's rate: the decode steps logged between two instants — their rows summed over the time
    from the first one's start to the last one's end; the host µs outside the forward is their
    median."""
    rows = [{"bs": 8, "start": 10.0 + i, "end": 10.5 + i, "schedule": 10.0, "run": 100.0,
             "forward": 60.0, "sample": 20.0, "process": 30.0 + i} for i in range(5)]
    rows.append({"bs": 64, "start": 50.0, "end": 51.0, "schedule": 0.0, "run": 0.0,
                 "forward": 0.0, "sample": 0.0, "process": 0.0})  # another generate's
    (tmp_path / "phases-1.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows)
                                             + '{"cut sho')
    w = decode_window(tmp_path, 9.0, 20.0, steps=6)
    assert w == {"tokens": 40, "seconds": 4.5, "host_us": 10 + 100 - 60 + 32}
    assert decode_window(tmp_path, 100.0, 200.0, steps=1, settle_s=0)["tokens"] == 0
