"""Where a decode step's time goes: a compact summary of a ``torch.profiler`` trace taken inside
an SGLang scheduler (the F jobs' profile pass, docs/gpu.md).

The scheduler's phases are annotated in the trace itself (``soft_spatial/<phase>[/decode]``,
:func:`~soft_spatial.compat.sglang.time_scheduler_phases`, one clock with the kernels), so the
summary needs nothing else. Over the decode steps of the trace (the region from the first decode
``run`` to the end of the last decode step's ``process``), per step:

* ``host_us``: the median host wall of each phase (schedule, run, forward, sample, process);
* ``step_us``: the region's length per step; ``gpu_busy_us``: the union of the kernels' intervals
  inside it per step, and ``gpu_idle_us`` what is left (the device waiting for the host);
* ``graph_launches`` and ``kernels_outside_graphs`` per step (a kernel launched by
  ``cudaGraphLaunch`` is inside a graph; every other one paid a launch from the host), with
  the outside kernels' device µs;
* ``top``: the kernels that took the most device time, per step: name (cut to 80 characters),
  calls, µs, whether a graph launched them.

The input is the chrome-trace JSON ``torch.profiler`` exports (``traceEvents``: complete events
``"ph": "X"`` with ``ts``/``dur`` in µs; kernels ``"cat": "kernel"``, the host's CUDA calls
``"cat": "cuda_runtime"``, both carrying ``args.correlation``).
"""
from __future__ import annotations

import gzip
import json
import statistics
from collections import defaultdict
from pathlib import Path

__all__ = ["summarize", "read_trace", "PHASES"]

PHASES = ("schedule", "run", "forward", "sample", "process")
_PREFIX = "soft_spatial/"


def read_trace(path: str | Path) -> dict:
    """A ``.json`` or ``.json.gz`` chrome trace."""
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        return json.load(f)


def _union(intervals: list[tuple[float, float]]) -> float:
    total, end = 0.0, None
    for a, b in sorted(intervals):
        if end is None or a > end:
            total += b - a
            end = b
        elif b > end:
            total += b - end
            end = b
    return total


def summarize(trace: dict, top: int = 8) -> dict:
    """The per-step summary of a profiled scheduler's decode steps (module docstring); ``steps``
    is 0 when the trace holds no annotated decode step."""
    events = [e for e in trace.get("traceEvents", []) if e.get("ph") == "X" and "ts" in e]
    ann = defaultdict(list)
    for e in events:
        name = str(e.get("name", ""))
        if name.startswith(_PREFIX):
            ann[name[len(_PREFIX):]].append(e)
    runs = sorted(ann.get("run/decode", []), key=lambda e: e["ts"])
    if not runs:
        return {"steps": 0}
    ends = [e["ts"] + e["dur"] for e in ann.get("process/decode", [])] or \
        [e["ts"] + e["dur"] for e in runs]
    lo, hi = runs[0]["ts"], max(ends)
    n = len(runs)
    host = {}
    for phase in PHASES:
        durs = [e["dur"] for key in (phase, f"{phase}/decode") for e in ann.get(key, [])
                if lo <= e["ts"] <= hi]
        host[phase] = round(statistics.median(durs), 1) if durs else 0.0
    graph_corr = {e["args"]["correlation"] for e in events
                  if e.get("cat") == "cuda_runtime" and e.get("name") == "cudaGraphLaunch"
                  and "correlation" in e.get("args", {})}
    launches = sum(1 for e in events if e.get("cat") == "cuda_runtime"
                   and e.get("name") == "cudaGraphLaunch" and lo <= e["ts"] <= hi)
    kernels = [e for e in events if e.get("cat") == "kernel" and lo <= e["ts"] < hi]
    busy = _union([(max(e["ts"], lo), min(e["ts"] + e["dur"], hi)) for e in kernels])
    by_name: dict[str, list] = defaultdict(lambda: [0, 0.0, False])
    outside, outside_us = 0, 0.0
    for e in kernels:
        args = e.get("args", {})
        in_graph = args.get("correlation") in graph_corr or "graph node id" in args or \
            "graph id" in args
        if not in_graph:
            outside += 1
            outside_us += e["dur"]
        rec = by_name[str(e.get("name", "?"))[:80]]
        rec[0] += 1
        rec[1] += e["dur"]
        rec[2] = rec[2] or in_graph
    step_us = (hi - lo) / n
    return {
        "steps": n,
        "host_us": host,
        "step_us": round(step_us, 1),
        "gpu_busy_us": round(busy / n, 1),
        "gpu_idle_us": round(step_us - busy / n, 1),
        "graph_launches": round(launches / n, 2),
        "kernels_outside_graphs": round(outside / n, 2),
        "outside_us": round(outside_us / n, 1),
        "top": [{"kernel": k, "calls": round(c / n, 2), "us": round(t / n, 1), "in_graph": g}
                for k, (c, t, g) in sorted(by_name.items(), key=lambda kv: -kv[1][1])[:top]],
    }
