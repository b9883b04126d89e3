"""SGLang's scheduler processes (sglang 0.5.12, ``entrypoints/engine.py``,
``managers/scheduler.py``): what every scheduler process does first, how a launcher starts them
through the plugin, what the plugin relies on under overlap scheduling. Imports sglang only
inside functions."""
from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable

from soft_spatial.compat.sglang.checks import missing
from soft_spatial.compat.sglang.graph_log import GRAPH_LOG_ENV, log_graph_decisions
from soft_spatial.compat.sglang.ops import native_ops_requested, use_native_ops
from soft_spatial.compat.sglang.phases import PHASE_LOG_ENV, time_scheduler_phases

__all__ = ["scheduler_process_setup", "native_scheduler_process", "scheduler_launch",
           "launch_engine", "problems"]


def scheduler_process_setup() -> None:
    """What every scheduler process does first, plugin or not: native ops when
    ``$SOFT_SPATIAL_SGLANG_NATIVE_OPS`` asks, the CUDA-graph counts when
    ``$SOFT_SPATIAL_GRAPH_LOG`` names a directory, the decode steps' phase times when
    ``$SOFT_SPATIAL_PHASE_LOG`` does (all inherited by the spawned process)."""
    import os
    if native_ops_requested():
        use_native_ops()
    if os.environ.get(GRAPH_LOG_ENV):
        log_graph_decisions(os.environ[GRAPH_LOG_ENV])
    if os.environ.get(PHASE_LOG_ENV):
        time_scheduler_phases(os.environ[PHASE_LOG_ENV])


def native_scheduler_process(*args, **kwargs):
    """``run_scheduler_process_func`` for SGLang engines without the soft plugin (the GPU kit's
    stock baseline): :func:`scheduler_process_setup`, then SGLang's own scheduler."""
    scheduler_process_setup()
    from sglang.srt.managers.scheduler import run_scheduler_process as run
    return run(*args, **kwargs)


@contextlib.contextmanager
def scheduler_launch(run_scheduler_process: Callable):
    """While active, SGLang launchers that read the module attribute ``sglang.srt.entrypoints.
    engine.run_scheduler_process`` at call time (0.5.12 ``entrypoints/engine.py`` L88; verl
    0.9.1's ``SGLangHttpServer.launch_server``) start every scheduler through
    ``run_scheduler_process``.

    It also runs SGLang's ``load_plugins()`` first (idempotent), as SGLang's own ``Engine`` and
    ``launch_server`` do before they build ``ServerArgs``: verl 0.9.1's ``launch_server`` builds
    ``ServerArgs`` without it, so installed SGLang plugins would not see the server's arguments.
    """
    from sglang.srt.plugins import load_plugins
    load_plugins()
    import sglang.srt.entrypoints.engine as sgl_engine
    original = sgl_engine.run_scheduler_process
    sgl_engine.run_scheduler_process = run_scheduler_process
    try:
        yield
    finally:
        sgl_engine.run_scheduler_process = original


def launch_engine(run_scheduler_process: Callable, **server_args):
    """SGLang's offline ``Engine`` (same keyword arguments as ``ServerArgs``) whose scheduler
    processes start through ``run_scheduler_process`` (0.5.12: the class attribute
    ``Engine.run_scheduler_process_func``, ``entrypoints/engine.py`` L196)."""
    from sglang.srt.entrypoints.engine import Engine

    class SoftEngine(Engine):
        run_scheduler_process_func = staticmethod(run_scheduler_process)

    return SoftEngine(**server_args)


def _overlap_problems() -> list:
    """What the plugin relies on under overlap scheduling (sglang 0.5.12, ``managers/
    scheduler.py``, ``scheduler_output_processor_mixin.py``, ``tp_worker.py``): batch t is launched
    (forward and sampling) before batch t-1's results are processed, on the one scheduler
    thread; a finished or retracted request's in-flight result is dropped; grammars are the one
    case sampled outside the forward (docs/sglang.md, "Overlap scheduling")."""
    from sglang.srt.managers import scheduler, scheduler_output_processor_mixin as out, tp_worker
    facts = [(scheduler.Scheduler.event_loop_overlap,
              ("batch_result = self.run_batch(batch)", "pop_and_process()")),
             (out.SchedulerOutputProcessorMixin.process_batch_result_decode,
              ("req.finished() or req.is_retracted",)),
             (tp_worker.TpModelWorker.forward_batch_generation, ("delay_sample_func",))]
    problems = missing(facts, "overlap scheduling")
    src = inspect.getsource(scheduler.Scheduler.event_loop_overlap)
    if src.find("self.run_batch(batch)") > src.rfind("pop_and_process()"):
        problems.append("sglang Scheduler.event_loop_overlap no longer launches batch t before "
                        "processing batch t-1 (overlap scheduling, docs/sglang.md)")
    return problems


def problems() -> list:
    """The launch seams (:func:`scheduler_launch`, :func:`launch_engine`) and overlap
    scheduling's order."""
    import sglang.srt.entrypoints.engine as sgl_engine
    out = []
    if not callable(getattr(sgl_engine, "run_scheduler_process", None)):
        out.append("sglang.srt.entrypoints.engine.run_scheduler_process is gone "
                   "(scheduler_launch)")
    if not callable(getattr(sgl_engine.Engine, "run_scheduler_process_func", None)):
        out.append("Engine.run_scheduler_process_func is gone (launch_engine)")
    return out + _overlap_problems()
