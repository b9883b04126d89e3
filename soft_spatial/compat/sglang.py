"""The SGLang internals soft_spatial touches (sglang 0.5.12), one function per touch.

The soft plugin itself (:mod:`soft_spatial.engines.sglang.hooks`) uses SGLang's plugin API
(``register_sampler_backend``, ``HookRegistry``) and these functions; every reference to an
SGLang private name, undocumented attribute or module-level seam is here, with the 0.5.12
location it relies on. :func:`check_internals` lists what moved (``tests/sglang_real/
test_plugin_real.py`` runs it against the real modules). Imports sglang only inside functions.
"""
from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable

__all__ = ["SUPPORTED_SGLANG", "check_version", "preprocess_logits", "attach_logprobs",
           "sync_token_ids_across_tp", "protect_soft_kv", "request_pool_rows",
           "worker_request_pool", "forward_batch_request_pool",
           "scheduler_launch", "collect_records", "launch_engine", "tensor_update_request",
           "NATIVE_OPS_ENV", "native_ops_requested", "use_native_ops", "scheduler_process_setup",
           "native_scheduler_process", "capture_graphs_with_last_hidden",
           "recapture_only_above_last", "eager_reason", "warn_eager_decodes", "GRAPH_LOG_ENV",
           "log_graph_decisions", "read_graph_log", "graph_log_extra", "PHASE_LOG_ENV", "PHASES",
           "time_scheduler_phases", "read_phase_log", "POOL_FREE_TARGET", "check_internals"]

SUPPORTED_SGLANG = "0.5.12"


def check_version() -> str:
    """Raise ImportError unless sglang is installed at the supported version (the hook targets
    and every function below are version-specific)."""
    import sglang

    if sglang.__version__ != SUPPORTED_SGLANG:
        raise ImportError(f"soft_spatial's SGLang plugin supports sglang=={SUPPORTED_SGLANG}, "
                          f"found {sglang.__version__}")
    return sglang.__version__


# -- the sampler backend (``sglang/srt/layers/sampler.py``, class ``Sampler``) ----------------
def preprocess_logits(sampler, logits, sampling_info):
    """``Sampler._preprocess_logits`` (0.5.12 L74): SGLang's custom logit processors and NaN
    check, as its own ``forward`` applies them before sampling."""
    return sampler._preprocess_logits(logits, sampling_info)


def attach_logprobs(sampler, logits_output, logprobs, top_logprobs_nums, token_ids_logprobs,
                    sampling_info, tokens) -> None:
    """``Sampler._attach_logprobs_to_output`` (0.5.12 L329): fills the output's log-prob
    fields for the chosen ``tokens`` when the request asked for log-probs."""
    sampler._attach_logprobs_to_output(logits_output, logprobs, top_logprobs_nums,
                                       token_ids_logprobs, sampling_info, tokens)


def sync_token_ids_across_tp(sampler, tokens, sampling_info) -> None:
    """``Sampler._sync_token_ids_across_tp`` (0.5.12 L361): with ``SYNC_TOKEN_IDS_ACROSS_TP=1``
    the ranks' sampled token ids are made equal (the spine only, not the records)."""
    sampler._sync_token_ids_across_tp(tokens, sampling_info)


# -- the scheduler's requests -----------------------------------------------------------------
class _SkipInsert:
    """The value of ``Req.skip_radix_cache_insert`` that SGLang reads as a bool when it inserts
    the request into the radix tree: true while the original flag or ``soft_kv()`` is."""

    __slots__ = ("original", "soft_kv")

    def __init__(self, original, soft_kv: Callable[[], bool]):
        self.original, self.soft_kv = original, soft_kv

    def __bool__(self) -> bool:
        return bool(self.original) or bool(self.soft_kv())


def protect_soft_kv(req, soft_kv: Callable[[], bool]) -> None:
    """Keep ``req``'s KV out of the radix cache whenever ``soft_kv()`` says the KV to insert holds
    a position computed from a soft input (sglang 0.5.12: ``Req.skip_radix_cache_insert``,
    ``managers/schedule_batch.py`` L887, read as a bool by ``mem_cache/common.py`` L47
    ``maybe_cache_unfinished_req`` and L582 ``release_kv_cache``, the two paths that insert a
    request into the tree). Idempotent.

    ``soft_kv`` is asked at the moment SGLang inserts, not when this is called: the prompt's KV
    (inserted after the prefill; a function of the prompt's tokens and images) is shared by the G
    samples of a prompt and by later requests, while KV computed from mixture inputs, which the
    tree's token keys do not describe, is freed instead of inserted and never matched. Under
    overlap scheduling the prefill's result is processed after the request's first decode batch
    is launched, so a flag set before that decode would also drop the prompt.
    """
    original = getattr(req, "skip_radix_cache_insert", False)
    if not isinstance(original, _SkipInsert):
        req.skip_radix_cache_insert = _SkipInsert(original, soft_kv)


def request_pool_rows(pool) -> int | None:
    """Rows of SGLang's request-to-token pool, i.e. one more than the largest request-pool slot
    (sglang 0.5.12: ``ReqToTokenPool.req_to_token`` has ``size + 1`` rows, ``mem_cache/
    memory_pool.py`` L142-L152: slots ``1..size`` go to requests, row 0 is the padding row that
    CUDA-graph padded batches index). The size of the static decode-input buffers, so every
    ``Req.req_pool_idx`` and every padded graph row indexes them in range. None for stand-ins."""
    table = getattr(pool, "req_to_token", None)
    return int(table.shape[0]) if table is not None else None


def worker_request_pool(worker):
    """The request pool of a ``TpModelWorker`` (sglang 0.5.12: ``worker.model_runner.
    req_to_token_pool``); None for stand-ins without a model runner."""
    return getattr(getattr(worker, "model_runner", None), "req_to_token_pool", None)


def forward_batch_request_pool(forward_batch):
    """The request pool a ``ForwardBatch`` indexes (sglang 0.5.12: the field
    ``ForwardBatch.req_to_token_pool``, set also on the batches ``CudaGraphRunner.
    capture_one_batch_size`` builds at start-up, where no scheduler batch exists)."""
    return getattr(forward_batch, "req_to_token_pool", None)


# -- native ops (``sglang/srt/layers/utils/multi_platform.py``, class ``MultiPlatformOp``) ------
NATIVE_OPS_ENV = "SOFT_SPATIAL_SGLANG_NATIVE_OPS"


def native_ops_requested(environ=None) -> bool:
    """Whether ``$SOFT_SPATIAL_SGLANG_NATIVE_OPS`` asks for native ops ("1", "true", "yes", "on");
    anything else but unset or "0"/"false"/"no"/"off" is refused, naming the variable."""
    import os
    value = (os.environ if environ is None else environ).get(NATIVE_OPS_ENV, "").strip().lower()
    if value in ("", "0", "false", "no", "off"):
        return False
    if value in ("1", "true", "yes", "on"):
        return True
    raise ValueError(f"${NATIVE_OPS_ENV}={value!r}: expected 1 or 0")


def use_native_ops() -> None:
    """Make every SGLang layer that has a ``forward_native`` (pure PyTorch) use it instead of its
    platform kernel, for layers built from now on in this process. Idempotent.

    sglang 0.5.12: ``MultiPlatformOp.__init__`` binds ``self._forward_method =
    self.dispatch_forward()`` (``layers/utils/multi_platform.py`` L36), which picks
    ``forward_cuda`` on CUDA; RMSNorm's (``layers/layernorm.py``) is sgl_kernel's fused kernel,
    which dispatches on fp16/bf16 only and, through flashinfer, builds its CUDA module on first use
    (the GPU kit trims flashinfer's JIT sources). This wraps ``dispatch_forward`` to return
    ``forward_native`` for every class that defines one. In fp32 the native RMSNorm is the same
    operations as transformers' (mean of squares, rsqrt, weight); in bf16 the ops are unfused, so
    throughput is below SGLang's real kernels (the GPU kit's report says which path ran).
    """
    from sglang.srt.layers.utils.multi_platform import MultiPlatformOp

    original = MultiPlatformOp.dispatch_forward
    if getattr(original, "soft_spatial_native", False):
        return

    def dispatch_forward(self):
        if type(self).forward_native is not MultiPlatformOp.forward_native:
            return self.forward_native
        return original(self)

    dispatch_forward.soft_spatial_native = True
    dispatch_forward.__wrapped__ = original
    MultiPlatformOp.dispatch_forward = dispatch_forward


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


# -- CUDA graphs (``sglang/srt/model_executor/cuda_graph_runner.py``, ``CudaGraphRunner``) ------
class _AtLeastLast:
    """Data descriptor for ``CudaGraphRunner.capture_hidden_mode``: every assignment keeps at
    least ``CaptureHiddenMode.LAST`` (FULL is kept); the value lives in the instance's own
    ``__dict__`` under the same name, so reads see exactly what was stored."""

    def __init__(self, last):
        self.last = last

    def __get__(self, obj, owner=None):
        if obj is None:
            return self
        return obj.__dict__["capture_hidden_mode"]

    def __set__(self, obj, value):
        obj.__dict__["capture_hidden_mode"] = max(value, self.last)


def capture_graphs_with_last_hidden() -> None:
    """Make every ``CudaGraphRunner`` capture its decode graphs with (at least)
    ``CaptureHiddenMode.LAST``, so decode batches that ask for the last hidden state (the soft
    plugin asks in every batch: AdaptSoft's input) replay a graph. Idempotent.

    sglang 0.5.12: ``CudaGraphRunner.__init__`` sets ``capture_hidden_mode = NULL`` (L641) and
    captures (L736); ``capture_one_batch_size`` sets it again, to NULL unless FULL, before each
    batch size's forward (L1052-L1055) and captures that forward with it (L1109); ``can_run``
    (L802-L814) refuses a batch whose requested mode is neither NULL nor the captured one; the
    recapture for a new mode (``recapture_if_needed``, L1201) runs only inside
    ``replay_prepare``, i.e. after ``can_run`` said yes. So no decode batch that asks for LAST
    ever replays a graph: the plugin's decode ran eagerly on the H200 (2026-11-26, two calls:
    0.147 x and 0.172 x stock SGLang with "graphs on", 0 of 752 batches replayed).

    This installs :class:`_AtLeastLast` as the class's ``capture_hidden_mode``: every one of
    those assignments keeps LAST (FULL is kept), so the graphs are captured computing the last
    hidden state and a batch asking for NULL or LAST replays. (A first fix wrapped ``capture``
    to raise the mode before it; ``capture_one_batch_size`` lowered it again: the second H200
    call counted ``captured_hidden`` 0.) Only processes that install the plugin are affected.
    """
    from sglang.srt.model_executor.cuda_graph_runner import CudaGraphRunner
    from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode

    if isinstance(CudaGraphRunner.__dict__.get("capture_hidden_mode"), _AtLeastLast):
        return
    CudaGraphRunner.capture_hidden_mode = _AtLeastLast(CaptureHiddenMode.LAST)


class _FlooredBatch:
    """A forward batch as ``recapture_if_needed`` reads it: every attribute the batch's own but
    the requested hidden-state mode, floored at ``floor`` (None counts as NULL)."""

    __slots__ = ("_batch", "capture_hidden_mode")

    def __init__(self, batch, floor):
        mode = batch.capture_hidden_mode
        self._batch = batch
        self.capture_hidden_mode = floor if mode is None or mode < floor else mode

    def __getattr__(self, name):
        return getattr(self._batch, name)


def recapture_only_above_last() -> None:
    """Make ``CudaGraphRunner.recapture_if_needed`` compare the graphs' mode with the batch's
    requested hidden-state mode floored at ``CaptureHiddenMode.LAST``: a batch asking for NULL
    (speculative modes, any path that skips the plugin's hook) replays the LAST graphs, which
    compute what it asks and more; a batch asking for FULL still recaptures. Idempotent.

    sglang 0.5.12: ``recapture_if_needed`` (L1201, called by ``replay_prepare`` for every batch
    that ``can_run`` accepted) recaptures every graph when ``self.capture_hidden_mode`` differs from
    the largest mode the batch, its ``spec_info`` and ``enable_return_hidden_states`` require.
    ``can_run`` accepts a NULL batch whatever the captured mode; with the graphs held at LAST
    (:func:`capture_graphs_with_last_hidden`) every such batch compared NULL with LAST and
    re-captured all graphs (the descriptor keeps the new mode at LAST, so the next NULL batch did
    it again). The batch itself is not modified.
    """
    from sglang.srt.model_executor.cuda_graph_runner import CudaGraphRunner
    from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode

    original = CudaGraphRunner.recapture_if_needed
    if getattr(original, "soft_spatial_floored", False):
        return

    def recapture_if_needed(self, forward_batch):
        return original(self, _FlooredBatch(forward_batch, CaptureHiddenMode.LAST))

    recapture_if_needed.soft_spatial_floored = True
    recapture_if_needed.__wrapped__ = original
    CudaGraphRunner.recapture_if_needed = recapture_if_needed


def _can_run_observers() -> dict:
    """The observers called after every ``CudaGraphRunner.can_run`` (sglang 0.5.12 L765: asked
    once per batch whose forward mode graphs can run, i.e. every decode batch of a server with
    graphs on) as ``observer(runner, forward_batch, ok)``, by name; wraps ``can_run`` once."""
    from sglang.srt.model_executor.cuda_graph_runner import CudaGraphRunner

    current = CudaGraphRunner.can_run
    observers = getattr(current, "soft_spatial_observers", None)
    if observers is not None:
        return observers
    observers = {}

    def can_run(self, forward_batch):
        ok = current(self, forward_batch)
        for observe in tuple(observers.values()):
            observe(self, forward_batch, ok)
        return ok

    can_run.soft_spatial_observers = observers
    can_run.__wrapped__ = current
    CudaGraphRunner.can_run = can_run
    return observers


def _requested_hidden_mode(forward_batch):
    """The hidden-state mode ``can_run`` compares with the captured one (sglang 0.5.12 L790: the
    larger of the batch's and its ``spec_info``'s)."""
    from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode
    spec = getattr(getattr(forward_batch, "spec_info", None), "capture_hidden_mode", None)
    return max(forward_batch.capture_hidden_mode or CaptureHiddenMode.NULL,
               spec or CaptureHiddenMode.NULL)


def eager_reason(runner, forward_batch) -> tuple[str, str]:
    """``(kind, words)``: why ``CudaGraphRunner.can_run`` sent ``forward_batch`` to the eager
    forward, for a batch it refused; ``kind`` names the condition (one of ``replace_embeds``,
    ``batch_size``, ``hidden_mode``, ``dp_sync``, ``other``), ``words`` says it with the values.
    The conditions are those of sglang 0.5.12's ``can_run`` (L765-L835), checked in its order."""
    from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode
    bs = int(forward_batch.batch_size)
    if getattr(forward_batch, "replace_embeds", None) is not None:
        return "replace_embeds", "the batch overrides token embeddings (replace_embeds)"
    if bs > int(runner.max_bs):
        return "batch_size", (f"a batch of {bs} rows is larger than the largest captured graph "
                              f"({int(runner.max_bs)} rows: raise cuda_graph_max_bs, or lower "
                              f"the rows in flight)")
    if getattr(runner, "disable_padding", False) and bs not in getattr(runner, "capture_bs", ()):
        return "batch_size", (f"no graph was captured for a batch of {bs} rows, and padding to a "
                              f"captured size is off (disable_padding)")
    requested, captured = _requested_hidden_mode(forward_batch), runner.capture_hidden_mode
    if requested not in (CaptureHiddenMode.NULL, captured):
        why = ("enable_return_hidden_states or a speculative mode holds them there, and SGLang "
               "replays only batches asking for the captured mode or none" if requested < captured
               else "they do not compute it (compat.sglang.capture_graphs_with_last_hidden not "
               "installed in this process?)")
        return "hidden_mode", (f"the batch asks for hidden states {requested.name}, the graphs "
                               f"were captured with {CaptureHiddenMode(captured).name}: {why}")
    if getattr(runner, "require_mlp_sync", False) and not getattr(
            forward_batch, "can_run_dp_cuda_graph", True):
        return "dp_sync", "data-parallel attention: another rank's batch cannot run a graph"
    return "other", ("another of CudaGraphRunner.can_run's conditions (encoder lengths, "
                     "two-batch overlap, ngram speculation, LoRA variant)")


def warn_eager_decodes(warn: Callable[[str], None]) -> None:
    """Call ``warn(message)`` the first time, in this process, that ``CudaGraphRunner.can_run``
    sends a batch to the eager forward for a given reason (:func:`eager_reason`'s ``kind``):
    one message per reason and engine process, naming the reason, the batch size and the
    graphs' largest size. Idempotent (the first ``warn`` stays)."""
    observers = _can_run_observers()
    if "warn_eager" in observers:
        return
    said: set = set()

    def observe(runner, forward_batch, ok):
        if ok:
            return
        kind, words = eager_reason(runner, forward_batch)
        if kind not in said:
            said.add(kind)
            warn(f"CUDA graphs: a decode batch ran eagerly, not as a captured graph: {words}. "
                 f"Said once per reason for this engine; such batches run at graphs-off speed")

    observers["warn_eager"] = observe


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

    observers = _can_run_observers()
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


# -- where a decode step's host time goes (``managers/scheduler.py``, ``model_runner.py``) --------
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


# -- the request pool (``mem_cache/memory_pool.py``) --------------------------------------------
#: where a request gives its request-pool slot back (sglang 0.5.12 ``ReqToTokenPool.free(self,
#: req)``, L179: every path that ends a request's life in the pool — finish, abort, retraction —
#: calls it with the Req while ``req.req_pool_idx`` still names the slot); the plugin hooks it
#: (``HookRegistry``, BEFORE) to learn which requests left without a per-step pass over the rows
POOL_FREE_TARGET = "sglang.srt.mem_cache.memory_pool.ReqToTokenPool.free"


# -- launching the schedulers ----------------------------------------------------------------
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


def collect_records(tokenizer_manager, accumulator) -> None:
    """Feed each batch output's ``customized_info`` to ``accumulator`` (a
    :class:`~soft_spatial.engines.sglang.client.TraceAccumulator`) before SGLang handles it.
    Idempotent.

    sglang 0.5.12: ``TokenizerManager.handle_loop`` passes every ``BatchStrOutput`` /
    ``BatchTokenIDOutput`` to ``self._handle_batch_output`` (``managers/tokenizer_manager.py``
    L1654/L1660), which keeps only the newest ``customized_info`` slice in ``meta_info``; this
    wraps that method on the instance.
    """
    handle = tokenizer_manager._handle_batch_output
    if getattr(handle, "soft_spatial_accumulator", None) is accumulator:
        return

    async def _handle_batch_output(recv_obj):
        accumulator.feed(recv_obj.rids, getattr(recv_obj, "customized_info", None))
        return await handle(recv_obj)

    _handle_batch_output.soft_spatial_accumulator = accumulator
    tokenizer_manager._handle_batch_output = _handle_batch_output


# -- weight updates over HTTP ----------------------------------------------------------------
def tensor_update_request(named_tensors, copies: int, load_format: str | None,
                          flush_cache: bool):
    """An ``UpdateWeightsFromTensorReqInput`` carrying ``named_tensors`` serialized once per TP
    worker (``copies``), as verl's SGLang ``ServerAdapter.update_weights`` builds it (sglang
    0.5.12: ``managers/io_struct.py`` L1466, ``utils/common.py`` L2234
    ``MultiprocessingSerializer``, and ``utils/patch_torch.py`` L41
    ``monkey_patch_torch_reductions``, which makes device tensors pickle as IPC handles)."""
    from sglang.srt.managers.io_struct import UpdateWeightsFromTensorReqInput
    from sglang.srt.utils import MultiprocessingSerializer
    from sglang.srt.utils.patch_torch import monkey_patch_torch_reductions

    monkey_patch_torch_reductions()
    named = list(named_tensors)
    return UpdateWeightsFromTensorReqInput(
        serialized_named_tensors=[MultiprocessingSerializer.serialize(named)
                                  for _ in range(copies)],
        load_format=load_format, flush_cache=flush_cache)


def check_internals() -> list:
    """Check every internal above against the installed sglang (needs sglang); return a list of
    problems (empty = OK)."""
    problems = []
    try:
        check_version()
    except ImportError as e:
        problems.append(str(e))
    from sglang.srt.layers.sampler import Sampler
    for name, params in (("_preprocess_logits", ["self", "logits", "sampling_info"]),
                         ("_attach_logprobs_to_output",
                          ["self", "logits_output", "logprobs", "top_logprobs_nums",
                           "token_ids_logprobs", "sampling_info", "batch_next_token_ids"]),
                         ("_sync_token_ids_across_tp",
                          ["self", "batch_next_token_ids", "sampling_info"])):
        fn = getattr(Sampler, name, None)
        got = None if fn is None else list(inspect.signature(fn).parameters)
        if got != params:
            problems.append(f"sglang Sampler.{name} is gone or changed: {got} != {params}")
    from sglang.srt.managers.tokenizer_manager import TokenizerManager
    if not callable(getattr(TokenizerManager, "_handle_batch_output", None)) or (
            "self._handle_batch_output(recv_obj)"
            not in inspect.getsource(TokenizerManager.handle_loop)):
        problems.append("TokenizerManager.handle_loop no longer calls "
                        "self._handle_batch_output(recv_obj) (collect_records)")
    import sglang.srt.entrypoints.engine as sgl_engine
    if not callable(getattr(sgl_engine, "run_scheduler_process", None)):
        problems.append("sglang.srt.entrypoints.engine.run_scheduler_process is gone "
                        "(scheduler_launch)")
    if not callable(getattr(sgl_engine.Engine, "run_scheduler_process_func", None)):
        problems.append("Engine.run_scheduler_process_func is gone (launch_engine)")
    from sglang.srt.mem_cache import common
    src = inspect.getsource(common)
    for needle in ('if getattr(req, "skip_radix_cache_insert", False):',
                   'not getattr(req, "skip_radix_cache_insert", False)'):
        if needle not in src:
            problems.append(f"mem_cache.common no longer reads Req.skip_radix_cache_insert as a "
                            f"bool: {needle!r} (protect_soft_kv)")
    from sglang.srt.managers.io_struct import UpdateWeightsFromTensorReqInput
    fields = set(getattr(UpdateWeightsFromTensorReqInput, "__dataclass_fields__", {}))
    missing = {"serialized_named_tensors", "load_format", "flush_cache"} - fields
    if missing:
        problems.append(f"UpdateWeightsFromTensorReqInput lost {sorted(missing)} "
                        f"(tensor_update_request)")
    problems += _graph_problems()
    problems += _phase_problems()
    problems += _pool_problems()
    problems += _overlap_problems()
    problems += _native_ops_problems()
    problems += _fp32_lm_head_problems()
    return problems


def _phase_problems() -> list:
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
    return _missing([(scheduler.Scheduler.event_loop_normal,
                      ("batch = self.get_next_batch_to_run()", "result = self.run_batch(batch)",
                       "self.process_batch_result(batch, result)"))], "the phase timer")


def _pool_problems() -> list:
    """What the plugin's slot bookkeeping relies on: ``ReqToTokenPool.free(self, req)`` frees
    ``req.req_pool_idx``, and finishing a request frees it there (:data:`POOL_FREE_TARGET`)."""
    import pkgutil
    cls_path, method = POOL_FREE_TARGET.rsplit(".", 1)
    fn = getattr(pkgutil.resolve_name(cls_path), method, None)
    if fn is None or list(inspect.signature(fn).parameters) != ["self", "req"]:
        return [f"sglang {POOL_FREE_TARGET} is gone or changed (the plugin's slot bookkeeping)"]
    from sglang.srt.mem_cache import common
    return _missing([(fn, ("self.free_slots.append(req.req_pool_idx)",)),
                     (common.release_kv_cache, ("req_to_token_pool.free(req)",))],
                    "the plugin's slot bookkeeping")


def _fp32_lm_head_problems() -> list:
    """What ``density.fp32_logits`` relies on (sglang 0.5.12): the server argument
    ``enable_fp32_lm_head`` exists, every ``LogitsProcessor`` reads it from the server-wide
    arguments, and ``_compute_lm_head`` then multiplies the hidden states and the head's weight
    upcast to fp32 (``layers/logits_processor.py`` L254, L898)."""
    from sglang.srt.layers.logits_processor import LogitsProcessor
    from sglang.srt.server_args import ServerArgs
    problems = []
    if "enable_fp32_lm_head" not in getattr(ServerArgs, "__dataclass_fields__", {}):
        problems.append("ServerArgs.enable_fp32_lm_head is gone (density.fp32_logits)")
    return problems + _missing(
        [(LogitsProcessor.__init__,
          ("self.use_fp32_lm_head = get_global_server_args().enable_fp32_lm_head",)),
         (LogitsProcessor._compute_lm_head,
          ("if self.use_fp32_lm_head:", "hidden_states.to(torch.float32), "
                                        "lm_head.weight.to(torch.float32).T"))],
        "the output head in fp32")


def _native_ops_problems() -> list:
    """What :func:`use_native_ops` relies on: ``MultiPlatformOp.__init__`` binds its forward
    through ``self.dispatch_forward()`` and the base class has a ``forward_native`` to compare."""
    from sglang.srt.layers.utils.multi_platform import MultiPlatformOp
    problems = []
    if not callable(getattr(MultiPlatformOp, "forward_native", None)):
        problems.append("MultiPlatformOp.forward_native is gone (use_native_ops)")
    init = inspect.getsource(MultiPlatformOp.__init__)
    if "self._forward_method" not in init or "self.dispatch_forward()" not in init:
        problems.append("MultiPlatformOp.__init__ no longer binds self._forward_method = "
                        "self.dispatch_forward() (use_native_ops)")
    return problems


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
    problems = _missing(facts, "overlap scheduling")
    src = inspect.getsource(scheduler.Scheduler.event_loop_overlap)
    if src.find("self.run_batch(batch)") > src.rfind("pop_and_process()"):
        problems.append("sglang Scheduler.event_loop_overlap no longer launches batch t before "
                        "processing batch t-1 (overlap scheduling, docs/sglang.md)")
    return problems


def _graph_problems() -> list:
    """What soft decoding under ``CudaGraphRunner`` relies on (sglang 0.5.12,
    ``model_executor/cuda_graph_runner.py``, ``managers/mm_utils.py``, ``managers/tp_worker.py``):
    the captured batch indexes the real request pool through the runner's static
    ``req_pool_indices`` buffer, refreshed before each replay; the decode embedding is computed
    and passed as ``input_embeds`` (what the hook replaces); sampling runs after the forward,
    outside the graph; the runner recaptures when the requested hidden-state mode changes."""
    from sglang.srt.managers import mm_utils, tp_worker
    from sglang.srt.model_executor import cuda_graph_runner as cgr
    facts = [(cgr.CudaGraphRunner.capture_one_batch_size,
              ("buffers.req_pool_indices[:bs]", "req_pool_indices=req_pool_indices",
               "req_to_token_pool=self.model_runner.req_to_token_pool")),
             (cgr.DecodeInputBuffers.populate_from_forward_batch,
              ("self.req_pool_indices[:raw_bs]", "forward_batch.req_pool_indices")),
             # recapture_only_above_last: the batch is read for its modes only, and the graphs
             # are recaptured when the captured mode differs from the largest one required
             (cgr.CudaGraphRunner.recapture_if_needed, (
                 "forward_batch.capture_hidden_mode",
                 'getattr(forward_batch.spec_info, "capture_hidden_mode", None)',
                 "if self.capture_hidden_mode != required_capture_hidden_mode:",
                 "self.capture()")),
             (cgr.CudaGraphRunner.replay_prepare, ("self.recapture_if_needed(forward_batch)",)),
             # eager_reason: can_run's conditions, in its order
             (cgr.CudaGraphRunner.can_run, ("if forward_batch.replace_embeds is not None:",
                                            "cuda_graph_bs <= self.max_bs",
                                            "forward_batch.can_run_dp_cuda_graph")),
             # capture_graphs_with_last_hidden: NULL at start, then the start-up capture; a batch
             # asking for another mode than the captured one (but NULL) does not replay
             (cgr.CudaGraphRunner.__init__, ("self.capture_hidden_mode = CaptureHiddenMode.NULL",
                                             "self.capture()")),
             # ... and each batch size's capture resets the mode through the attribute (the
             # descriptor's floor) and captures its forward with it
             (cgr.CudaGraphRunner.capture_one_batch_size, (
                 "if self.capture_hidden_mode != CaptureHiddenMode.FULL:",
                 "self.capture_hidden_mode = (", "capture_hidden_mode=self.capture_hidden_mode")),
             (cgr.CudaGraphRunner.can_run, ("requested_capture_hidden_mode == CaptureHiddenMode.NULL",
                                            "requested_capture_hidden_mode == self.capture_hidden_mode")),
             (mm_utils.general_mm_embed_routine, ("input_embeds = embed_tokens(input_ids)",
                                                  "input_embeds=input_embeds")),
             (tp_worker.TpModelWorker.forward_batch_generation,
              ("self.model_runner.forward(", "self.model_runner.sample("))]
    return _missing(facts, "soft decoding under CUDA graphs")


def _missing(facts, what: str) -> list:
    """One problem per needle missing from its function's source (``facts``: (function,
    needles) pairs)."""
    problems = []
    for fn, needles in facts:
        src = inspect.getsource(getattr(fn, "__wrapped__", fn))
        for needle in needles:
            if needle not in src:
                problems.append(f"sglang {fn.__qualname__} no longer contains {needle!r} "
                                f"({what}, docs/sglang.md)")
    return problems
