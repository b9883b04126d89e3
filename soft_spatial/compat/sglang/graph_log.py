"""How many decode batches replayed a CUDA graph, counted in each scheduler process (sglang 0.5.12,
``CudaGraphRunner.can_run``): "graphs on" is a claim until the counts say so (the GPU kit reads
them back). Imports sglang only inside functions."""
from __future__ import annotations

from collections.abc import Callable

from soft_spatial.compat.sglang.graphs import can_run_observers, eager_reason

__all__ = ["GRAPH_LOG_ENV", "graph_log_extra", "log_graph_decisions", "read_graph_log"]


GRAPH_LOG_ENV = "SOFT_SPATIAL_GRAPH_LOG"


_GRAPH_LOG_EXTRAS: dict[str, Callable[[], dict]] = {}


def graph_log_extra(name: str, counts: Callable[[], dict]) -> None:
    """Add ``counts()`` (a dict of counts) under ``name`` to every write of this process's
    graph log (:func:`log_graph_decisions`): the soft sampler's own graphed and eager steps."""
    _GRAPH_LOG_EXTRAS[name] = counts


def log_graph_decisions(directory: str) -> None:
    """Count, in this scheduler process, the decode batches that replay a CUDA graph and those
    that run eagerly (``CudaGraphRunner.can_run``, sglang 0.5.12 L765: asked once per batch whose
    mode graphs can run), into ``<directory>/graphs-<pid>.json``: the counts (rewritten every 16
    batches, so at most 15 behind) and the first eager batch's size, hidden-state modes
    (requested, captured) and reason (:func:`eager_reason`). Idempotent. The GPU kit's F jobs
    read it back (:func:`read_graph_log`): "graphs on" is a claim until the counts say so."""
    import json
    import os
    from pathlib import Path

    observers = can_run_observers()
    if "graph_log" in observers:
        return
    path = Path(directory) / f"graphs-{os.getpid()}.json"
    state = {"pid": os.getpid(), "replayed": 0, "eager": 0, "first_eager": None}

    def write():
        tmp = path.with_name(path.name + ".tmp")
        extras = {name: counts() for name, counts in _GRAPH_LOG_EXTRAS.items()}
        tmp.write_text(json.dumps({**state, **extras}))
        tmp.replace(path)

    def observe(runner, forward_batch, ok):
        state["replayed" if ok else "eager"] += 1
        if not ok and state["first_eager"] is None:
            state["first_eager"] = {
                "batch_size": int(forward_batch.batch_size), "max_bs": int(runner.max_bs),
                "requested_hidden": int(forward_batch.capture_hidden_mode),
                "captured_hidden": int(runner.capture_hidden_mode),
                "reason": eager_reason(runner, forward_batch)[1]}
            write()
        elif (state["replayed"] + state["eager"]) % 16 == 0:
            write()

    Path(directory).mkdir(parents=True, exist_ok=True)
    observers["graph_log"] = observe


def read_graph_log(directory: str) -> dict:
    """``{"replayed": n, "eager": m, "first_eager": {...} or None, "sampler": {...}}`` summed
    over the scheduler processes that logged into ``directory`` (:func:`log_graph_decisions`;
    ``sampler``: the soft sampler's steps by how they ran, where the plugin logged them)."""
    import json
    from collections import Counter
    from pathlib import Path
    out = {"replayed": 0, "eager": 0, "first_eager": None, "processes": 0}
    sampler: Counter = Counter()
    for f in sorted(Path(directory).glob("graphs-*.json")):
        d = json.loads(f.read_text())
        out["replayed"] += d["replayed"]
        out["eager"] += d["eager"]
        out["first_eager"] = out["first_eager"] or d["first_eager"]
        out["processes"] += 1
        sampler.update(d.get("sampler") or {})
    if sampler:
        out["sampler"] = dict(sampler)
    return out
