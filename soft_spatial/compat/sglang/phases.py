"""Where a decode step's host time goes (sglang 0.5.12, ``managers/scheduler.py``,
``model_executor/model_runner.py``): the scheduler's phases timed and annotated for the profiler.
Imports sglang only inside functions."""
from __future__ import annotations

from soft_spatial.compat.sglang.checks import missing

__all__ = ["PHASE_LOG_ENV", "PHASES", "time_scheduler_phases", "read_phase_log", "problems"]


PHASE_LOG_ENV = "SOFT_SPATIAL_PHASE_LOG"


#: the timed phases of a decode step: the method each one is (sglang 0.5.12), and what it holds
PHASES = {
    "schedule": ("sglang.srt.managers.scheduler.Scheduler", "get_next_batch_to_run",
                 "picking the next batch and preparing it"),
    "run": ("sglang.srt.managers.scheduler.Scheduler", "run_batch",
            "the batch's forward and sampling as the scheduler launches them (hooks included)"),
    "forward": ("sglang.srt.model_executor.model_runner.ModelRunner", "forward",
                "the model's forward (a graph replay, or the eager forward)"),
    "sample": ("sglang.srt.model_executor.model_runner.ModelRunner", "sample",
               "the sampler"),
    "process": ("sglang.srt.managers.scheduler.Scheduler", "process_batch_result",
                "processing the batch's results (tokens, records, streaming)"),
}


def _is_decode(batch) -> bool:
    mode = getattr(batch, "forward_mode", None)
    return mode is not None and mode.is_decode()


def time_scheduler_phases(directory: str) -> None:
    """Time every decode step's phases (:data:`PHASES`) in this scheduler process, host wall
    clock, into ``<directory>/phases-<pid>.jsonl``: one line per decode batch,
    ``{"bs": rows, "start": s, "end": s, "<phase>": µs, ...}`` (``start`` when the scheduler
    began picking it, ``end`` when its results were processed: ``time.monotonic`` seconds, one
    clock for every process of the machine). Under overlap scheduling batch t+1 is launched
    before batch t's results are processed: runs and results are matched first in, first out.
    Each phase also runs inside a ``torch.profiler.record_function`` named
    ``soft_spatial/<phase>`` (``/decode`` for a decode batch's), so a profiler trace of the
    scheduler says where its steps begin (the GPU kit's profile pass). Idempotent. Read back by
    :func:`read_phase_log`: the decode time of the CPU bench (``scripts/bench_sampler.py``) and
    of the GPU kit's F jobs (docs/gpu.md)."""
    import collections
    import json
    import os
    import pkgutil
    import time
    from pathlib import Path

    from torch.profiler import record_function

    classes = {name: pkgutil.resolve_name(cls) for name, (cls, _, _) in PHASES.items()}
    if getattr(getattr(classes["run"], "run_batch"), "soft_spatial_phases", False):
        return
    Path(directory).mkdir(parents=True, exist_ok=True)
    out = open(Path(directory) / f"phases-{os.getpid()}.jsonl", "a", buffering=1)
    clock = time.monotonic
    state = {"scheduled": None, "current": None}
    pending: collections.deque = collections.deque()

    def batch_of(name, args, kwargs):
        if name == "sample":
            return args[1] if len(args) > 1 else kwargs.get("forward_batch")
        if name == "schedule":
            return None
        return args[0] if args else kwargs.get("batch", kwargs.get("forward_batch"))

    def timed(name, method):
        original = getattr(classes[name], method)

        def wrapper(self, *args, **kwargs):
            decode = _is_decode(batch_of(name, args, kwargs))
            t0 = clock()
            with record_function(f"soft_spatial/{name}" + ("/decode" if decode else "")):
                result = original(self, *args, **kwargs)
            dt = (clock() - t0) * 1e6
            if name == "schedule":
                state["scheduled"] = (t0, dt) if _is_decode(result) else None
            elif name == "run":
                row = None
                if decode:
                    start, sched = state["scheduled"] or (t0, 0.0)
                    row = {"bs": len(args[0].reqs) if args else None, "start": start,
                           "schedule": sched, "forward": 0.0, "sample": 0.0,
                           **(state["current"] or {})}
                    row["run"] = dt
                pending.append(row)
                state["current"] = None
            elif name in ("forward", "sample"):
                if decode:
                    cur = state["current"] = state["current"] or {}
                    cur[name] = cur.get(name, 0.0) + dt
            elif name == "process" and pending:
                row = pending.popleft()
                if row is not None:
                    row["process"], row["end"] = dt, clock()
                    out.write(json.dumps(row) + "\n")
            return result

        wrapper.soft_spatial_phases = True
        wrapper.__wrapped__ = original
        setattr(classes[name], method, wrapper)

    for name, (_, method, _) in PHASES.items():
        timed(name, method)


def read_phase_log(directory: str) -> list[dict]:
    """Every decode step :func:`time_scheduler_phases` logged into ``directory``, in order
    (all scheduler processes; a line cut short by a killed process is skipped)."""
    import json
    from pathlib import Path
    rows = []
    for f in sorted(Path(directory).glob("phases-*.jsonl")):
        for line in f.read_text().splitlines():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return sorted(rows, key=lambda r: r["start"])


def problems() -> list:
    """What :func:`time_scheduler_phases` relies on: each phase's method exists, the scheduler
    runs ``run_batch(batch)`` then ``process_batch_result(batch, result)``, and a decode step's
    forward and sampling happen inside ``run_batch`` (``TpModelWorker.forward_batch_generation``
    calls ``model_runner.forward`` and ``model_runner.sample``)."""
    import pkgutil
    problems = []
    for name, (cls, method, _) in PHASES.items():
        if not callable(getattr(pkgutil.resolve_name(cls), method, None)):
            problems.append(f"sglang {cls}.{method} is gone (time_scheduler_phases: {name})")
    if problems:
        return problems
    from sglang.srt.managers import scheduler
    return missing([(scheduler.Scheduler.event_loop_normal,
                      ("batch = self.get_next_batch_to_run()", "result = self.run_batch(batch)",
                       "self.process_batch_result(batch, result)"))], "the phase timer")
