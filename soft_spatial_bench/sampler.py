"""What one decode step costs the host, stock SGLang against the soft plugin, on the CPU through
SGLang 0.5.12's real classes (``scripts/bench_sampler.py``; docs/sglang.md, "The sampler's
host work").

Two measurements, one row per (implementation, rows) — ``stock`` (SGLang's own ``Sampler``,
PyTorch sampling) and the plugin in ``hard``, ``fixed`` and ``adaptsoft`` at 8 and 64 rows:

* **the step alone** (:func:`measure_step`, in this process): a decode batch of fake requests
  through what SGLang runs per step — for the plugin its hook around
  ``TpModelWorker.forward_batch_generation`` (the real ``_tp_hook``) and its ``Sampler``
  subclass; for both the records' collection as SGLang's
  ``SchedulerOutputProcessorMixin.maybe_collect_customized_info`` does it row by row, the tokens
  appended to the requests, and every ``stream_interval`` steps the slices SGLang streams,
  pickled. Counted in the sampling part of one step (SGLang's own loop over the rows, which
  reads each row's record, comes after it) of the plugin's graphed path (:class:`StepCounter`; on a CPU the
  graph's static path, run without a graph and counted as one op): the aten ops dispatched
  outside the captured graph, the host-to-device and device-to-host copies a device would make
  (host values turned into tensors, non-blocking copies to the host), the Python calls, and the
  lines of soft_spatial that ran (the same at 8 and 64 rows when nothing loops over the rows);
  timed over many steps of the eager path a CPU runs: host µs per step (median), the garbage
  collections.
* **the real CPU engine** (:func:`measure_engine`, a worker process per engine): SGLang's offline
  engine decoding 8 and 64 rows with the plugin or without it, each scheduler logging its decode
  steps' phases (:func:`~soft_spatial.compat.sglang.time_scheduler_phases`); the host time of a
  step outside the forward is schedule + run − forward + process (median over the steps). The
  engines are all started first and measured in turns (as are the step-alone rows), so a busy
  spell of a shared machine hits every implementation alike.

On a CPU every op executes where it is dispatched, so host µs include the small tensors' compute;
the counts are what a GPU pays in launches. Nothing here is asserted on time (the tests check the
counts' logic; the numbers are this script's output)."""
from __future__ import annotations

import gc
import pickle
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from types import SimpleNamespace

import torch
from torch.utils._python_dispatch import TorchDispatchMode

__all__ = ["IMPLS", "ROWS", "SamplerRow", "StepCounter", "sglang_setup", "count_step",
           "time_steps", "measure_step", "measure_engines", "host_outside_forward", "rows_json"]

IMPLS = ("stock", "hard", "fixed", "adaptsoft")
ROWS = (8, 64)
# the plugin's own lines are those of soft_spatial/ (this harness, soft_spatial_bench/, emulates
# SGLang's part and is not counted)
_PACKAGE = str(Path(__file__).resolve().parents[1] / "soft_spatial") + "/"


@dataclass
class SamplerRow:
    """One measured row of ``--json`` (module docstring); ``engine_host_us`` None until the
    engine part ran."""

    impl: str
    rows: int
    ops_outside_graph: int
    python_calls: int
    host_us: float
    d2h_copies: int
    h2d_copies: int
    info_keys: int
    lines: int
    gc_per_100_steps: float
    engine_host_us: float | None = None

    @classmethod
    def keys(cls) -> list[str]:
        return [f.name for f in fields(cls)]


class StepCounter(TorchDispatchMode):
    """Counts, while active, the aten ops dispatched, the copies a device would make (host data
    made a tensor: ``lift_fresh``; a copy to another device; a non-blocking copy to the host), the
    Python calls and the lines of soft_spatial executed. :meth:`graph` wraps a captured graph's
    replay: counted as one op, nothing inside it counted."""

    def __init__(self):
        super().__init__()
        self.ops = self.h2d = self.d2h = self.calls = self.lines = 0
        self.paused = False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if not self.paused:
            self.ops += 1
            if func is torch.ops.aten.lift_fresh.default:
                self.h2d += 1
            elif func is torch.ops.aten._to_copy.default and args:
                src, dst = args[0].device, torch.device(kwargs.get("device") or args[0].device)
                if dst.type == "cpu" and (src.type != "cpu" or kwargs.get("non_blocking")):
                    self.d2h += 1
                elif dst.type != "cpu" and src.type == "cpu":
                    self.h2d += 1
        return func(*args, **kwargs)

    def graph(self, replay: Callable) -> Callable:
        def counted(*args, **kwargs):
            self.ops += 1
            self.paused = True
            try:
                return replay(*args, **kwargs)
            finally:
                self.paused = False
        return counted

    def _trace(self, frame, event, arg):
        if event == "call":
            self.calls += 1
            file = frame.f_code.co_filename
            ours = file.startswith(_PACKAGE)
            return self._trace if ours else None
        if event == "line":
            self.lines += 1
        return self._trace

    def __enter__(self):
        sys.settrace(self._trace)
        return super().__enter__()

    def __exit__(self, *exc):
        sys.settrace(None)
        return super().__exit__(*exc)


# -- the step alone --------------------------------------------------------------------------------
class _Req:
    """The ``Req`` fields SGLang's sampler path, the plugin and the records' collection read."""

    def __init__(self, rid: str, seed: int, slot: int, sampling):
        from soft_spatial.engines.sglang.client import PARAM_KEY, request_params
        self.rid, self.output_ids, self.is_chunked, self.req_pool_idx = rid, [], 0, slot
        self.customized_info = None
        self.send_token_offset = 0
        self.skip_radix_cache_insert = False
        self.sampling_params = SimpleNamespace(
            custom_params={PARAM_KEY: request_params(seed, sampling)},
            temperature=sampling.temperature, top_k=sampling.top_k or -1, top_p=sampling.top_p)


class _Mode:
    """A forward mode as the plugin's hook asks it."""

    def __init__(self, decode: bool):
        self.decode = decode

    def is_decode(self) -> bool:
        return self.decode


def sglang_setup(model_dir: str) -> None:
    """Process-wide SGLang state a ``Sampler`` needs (global server arguments, a gloo world of
    one, the model-parallel groups), once."""
    import socket
    from sglang.srt.distributed import parallel_state as ps
    from sglang.srt.server_args import ServerArgs, set_global_server_args_for_scheduler
    set_global_server_args_for_scheduler(ServerArgs(model_path=model_dir, device="cpu",
                                                    sampling_backend="pytorch"))
    if not ps.model_parallel_is_initialized():
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        ps.init_distributed_environment(backend="gloo", world_size=1, rank=0, local_rank=0,
                                        distributed_init_method=f"tcp://127.0.0.1:{port}")
        ps.initialize_model_parallel(1)


class _StepHarness:
    """One decode step of ``rows`` requests as SGLang runs it, for one implementation."""

    def __init__(self, impl: str, rows: int, vocab: int, hidden: int, think_end: int,
                 stream_interval: int, graphs: bool = False):
        from sglang.srt.layers.logits_processor import LogitsProcessorOutput
        from sglang.srt.managers.scheduler_output_processor_mixin import \
            SchedulerOutputProcessorMixin
        from sglang.srt.sampling.sampling_batch_info import SamplingBatchInfo
        from soft_spatial.softthink import SamplingConfig
        self.impl, self.rows, self.stream_interval = impl, rows, stream_interval
        self._output = LogitsProcessorOutput
        self._collect = SchedulerOutputProcessorMixin.maybe_collect_customized_info
        g = torch.Generator().manual_seed(rows)
        self.logits = torch.randn(rows, vocab, generator=g) * 3
        self.logits[:, think_end] -= 30.0  # rows stay in their thinking (soft) steps
        self.hidden = torch.randn(rows, hidden, generator=g)
        self.sampling_info = SamplingBatchInfo(
            temperatures=torch.ones(rows, 1), top_ps=torch.ones(rows),
            top_ks=torch.full((rows,), 1 << 30, dtype=torch.int32), min_ps=torch.zeros(rows),
            is_all_greedy=False, need_top_p_sampling=False, need_top_k_sampling=False,
            need_min_p_sampling=False, vocab_size=vocab, device="cpu")
        self.pool = SimpleNamespace(req_to_token=torch.zeros(rows + 1, 1, dtype=torch.int32))
        self.reqs = [_Req(f"r{i}", 1000 + i, i + 1, SamplingConfig()) for i in range(rows)]
        self.slots = torch.arange(1, rows + 1)
        self.sampler = self._sampler(impl, hidden, think_end, vocab)
        if graphs and hasattr(getattr(self, "runtime", None), "use_graphs"):
            # the graphed path; on a CPU its static path (a runtime without graphs: eager)
            self.runtime.use_graphs(ROWS, capture=torch.cuda.is_available())
        self.steps = 0
        self._step(decode=False)  # the requests' prefill (their state, for the plugin)

    def _sampler(self, impl, hidden, think_end, vocab):
        from sglang.srt.layers.sampler import Sampler, create_sampler
        if impl == "stock":
            return Sampler()
        from soft_spatial_bench.workloads import random_controller
        from soft_spatial.engines.sglang import SchedulerSetup, hooks
        from soft_spatial.engines.sglang.runtime import SoftRuntime
        from soft_spatial.softthink import SoftThinkingConfig
        from soft_spatial.softthink.settings import SoftSettings
        soft = SoftThinkingConfig(mode=impl)
        setup = SchedulerSetup(soft=SoftSettings(soft_thinking=soft, seed=0), hidden_size=hidden,
                               think_end_id=think_end if soft.is_soft else None,
                               banned_ids=[vocab - 1])
        rt = SoftRuntime(setup)
        if impl == "adaptsoft":
            rt.set_controller(random_controller(hidden, seed=1).to_state())
        hooks.install(setup)
        hooks.set_runtime(rt)
        self.runtime = rt
        return create_sampler("soft_gumbel")

    def prepare(self):
        """The forward's output SGLang hands the sampler (a fresh copy of the logits: stock
        samples in place). Not part of what is counted or timed."""
        return self._output(next_token_logits=self.logits.clone(), hidden_states=self.hidden)

    def run(self, out, decode: bool = True) -> None:
        """One step's sampling, then what SGLang does with its result."""
        self.collect(out, self.sample(out, decode))

    def sample(self, out, decode: bool = True):
        """The step's sampling as SGLang's forward runs it (the plugin: its hook around the
        worker's forward, its sampler): the emitted tokens."""
        if self.impl == "stock":
            tokens = self.sampler(out, self.sampling_info, False, [], [], None)
        else:
            from soft_spatial.engines.sglang import hooks
            from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode
            mwb = SimpleNamespace(reqs=self.reqs, capture_hidden_mode=CaptureHiddenMode.NULL,
                                  forward_mode=_Mode(decode), extend_seq_lens=[1] * self.rows,
                                  req_pool_indices=self.slots)
            worker = SimpleNamespace(model_runner=SimpleNamespace(req_to_token_pool=self.pool))
            tokens = hooks._tp_hook(
                lambda *a, **k: self.sampler(out, self.sampling_info, False, [], [], None),
                worker, mwb)
        return tokens

    def collect(self, out, tokens) -> None:
        """What SGLang does with a step's result, row by row (its own loop, emulated): the
        token appended, the records collected; every ``stream_interval`` steps the slices
        streamed to the detokenizer, pickled."""
        for i, (req, tok) in enumerate(zip(self.reqs, tokens.tolist())):
            req.output_ids.append(tok)
            self._collect(None, i, req, out)
        self.steps += 1
        if self.steps % self.stream_interval == 0:  # the slices streamed to the detokenizer
            pickle.dumps({k: [r.customized_info[k][r.send_token_offset:] for r in self.reqs]
                          for k in (self.reqs[0].customized_info or {})})
            for r in self.reqs:
                r.send_token_offset = len(r.output_ids)

    def _step(self, decode: bool = True) -> None:
        self.run(self.prepare(), decode)

    def info_keys(self) -> int:
        return len(self.reqs[0].customized_info or {})


def count_step(impl: str, rows: int, vocab: int, hidden: int, think_end: int,
               stream_interval: int = 50) -> SamplerRow:
    """The counts of one decode step (module docstring) for ``impl`` at ``rows`` rows, on the
    plugin's graphed path (on a CPU its static path without a graph; the captured step counted
    as one op), after a warm-up. ``host_us`` is left 0: :func:`time_steps` measures it."""
    g = _StepHarness(impl, rows, vocab, hidden, think_end, stream_interval, graphs=True)
    for _ in range(3):
        g._step()
    counter = StepCounter()
    if getattr(getattr(g, "runtime", None), "graphs", None) is not None:
        g.runtime.graphs.wrap_replay(counter.graph)
    out = g.prepare()
    with torch.no_grad(), counter:  # the forward's part: SGLang's loop over rows comes after
        tokens = g.sample(out)
    g.collect(out, tokens)
    return SamplerRow(impl=impl, rows=rows, ops_outside_graph=counter.ops,
                      python_calls=counter.calls, host_us=0.0, d2h_copies=counter.d2h,
                      h2d_copies=counter.h2d, info_keys=g.info_keys(), lines=counter.lines,
                      gc_per_100_steps=0.0)


def time_steps(rows: list[SamplerRow], vocab: int, hidden: int, think_end: int,
               steps: int = 200, turn: int = 10, stream_interval: int = 50) -> None:
    """Host µs per decode step (median) and garbage collections per 100 steps of the eager path
    a CPU runs, into ``rows``: every row's harness built first, then ``turn`` steps of each in
    turns whose order rotates, so a busy spell of a shared machine hits every row alike."""
    harness = [_StepHarness(r.impl, r.rows, vocab, hidden, think_end, stream_interval)
               for r in rows]
    times: list[list[float]] = [[] for _ in rows]
    gcs = [0] * len(rows)
    with torch.no_grad():
        for h in harness:
            for _ in range(3):
                h._step()
        for t in range(-(-steps // turn)):
            order = list(range(len(rows)))
            order = order[t % len(order):] + order[:t % len(order)]
            for i in order:
                g0 = sum(s["collections"] for s in gc.get_stats())
                for _ in range(turn):
                    out = harness[i].prepare()
                    t0 = time.perf_counter_ns()
                    harness[i].run(out)
                    times[i].append((time.perf_counter_ns() - t0) / 1e3)
                gcs[i] += sum(s["collections"] for s in gc.get_stats()) - g0
    for r, ts, n in zip(rows, times, gcs):
        r.host_us = round(statistics.median(ts), 1)
        r.gc_per_100_steps = round(100 * n / len(ts), 1)


def measure_step(impl: str, rows: int, vocab: int, hidden: int, think_end: int,
                 steps: int = 200, stream_interval: int = 50) -> SamplerRow:
    """:func:`count_step` and :func:`time_steps` of one row."""
    row = count_step(impl, rows, vocab, hidden, think_end, stream_interval)
    time_steps([row], vocab, hidden, think_end, steps, stream_interval=stream_interval)
    return row


# -- the real CPU engine ---------------------------------------------------------------------------
def host_outside_forward(step: dict) -> float:
    """A logged decode step's host µs outside the model's forward (schedule + run − forward +
    process)."""
    return step["schedule"] + step["run"] - step["forward"] + step["process"]


def _serve_engine(conn, impl: str, model: str, phase_dir: str, steps: int, ctrl: str | None):
    """One engine in this (spawned) process, idle between the parent's requests (its scheduler
    sleeps): "go" decodes 8 and then 64 rows for ``steps`` steps; anything else ends it. Every
    scheduler logs its decode steps into ``phase_dir``."""
    import os
    from soft_spatial.compat.sglang import PHASE_LOG_ENV
    from soft_spatial_bench.gpu.graphs import _Plugin, _Stock
    from soft_spatial_bench.gpu.prompts import text_prompts
    from soft_spatial_bench.gpu.sglang_args import cpu_args
    from transformers import AutoTokenizer

    os.environ[PHASE_LOG_ENV] = phase_dir
    args = cpu_args(sleep_on_idle=True)
    eng = None
    try:
        eng = _Stock(model, args) if impl == "stock" else _Plugin(model, impl, ctrl, args)
        prompts = text_prompts(AutoTokenizer.from_pretrained(model), 8, 2)
        eng.tokens(prompts, 1, 4)  # warm-up
        conn.send("ready")
        while conn.recv() == "go":
            for n in (1, 8):  # 8 rows, 64 rows
                eng.backend.flush_cache()
                eng.tokens(prompts, n, steps)
            conn.send("done")
    except Exception as e:  # reported, not raised: the parent prints it
        conn.send(f"{type(e).__name__}: {e}")
    finally:
        if eng is not None:
            eng.close()


def measure_engines(impls, model: str, work: Path, steps: int = 48, turns: int = 3,
                    ctrl: str | None = None) -> dict[str, dict[int, float]]:
    """The real CPU engine of every implementation, all started first (one after another), then
    ``turns`` turns of each (order rotating): median host µs outside the forward per decode step,
    ``{impl: {8: µs, 64: µs}}`` (steps of exactly that many rows; each generate's first two
    decode steps skipped)."""
    import multiprocessing as mp
    from soft_spatial.compat.sglang import read_phase_log
    ctx = mp.get_context("spawn")
    workers = {}
    try:
        for impl in impls:  # not daemonic: SGLang's engine starts children of its own
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=_serve_engine, args=(child, impl, model,
                                                           str(work / f"phases-{impl}"), steps,
                                                           ctrl))
            proc.start()
            workers[impl] = (proc, parent)
            # one start at a time: engines starting together can pick the same free port
            if (answer := parent.recv()) != "ready":
                raise RuntimeError(f"bench_sampler: the {impl} engine failed: {answer}")
        order = list(impls)
        for t in range(turns):
            for impl in order[t % len(order):] + order[:t % len(order)]:
                workers[impl][1].send("go")
                if (answer := workers[impl][1].recv()) != "done":
                    raise RuntimeError(f"bench_sampler: the {impl} engine failed: {answer}")
    finally:
        for proc, conn in workers.values():
            try:
                conn.send("close")
            except OSError:
                pass
        for proc, _ in workers.values():
            proc.join(timeout=120)
            if proc.is_alive():
                proc.terminate()
                proc.join(timeout=30)
    out = {}
    for impl in impls:
        logged = read_phase_log(str(work / f"phases-{impl}"))
        out[impl] = {}
        for rows in ROWS:
            sizes = [s for s in logged if s["bs"] == rows]
            hosts = [host_outside_forward(s) for s in sizes]
            out[impl][rows] = round(statistics.median(hosts), 1) if hosts else None
    return out


def rows_json(rows: list[SamplerRow]) -> list[dict]:
    return [asdict(r) for r in rows]
