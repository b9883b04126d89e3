"""F — soft decoding at hard speed: one SGLang engine's decode throughput per job (the headline
plan's F jobs), and the soft sampler's sync check (``X/sync``).

One engine per job: stock SGLang (no plugin: hard decoding, PyTorch sampling) or the plugin in
``hard``, ``fixed`` or ``adaptsoft``; CUDA graphs on or off; overlap scheduling on or off;
``kernels`` "native" (every SGLang layer's PyTorch ``forward_native``) or "fused" (SGLang's own
CUDA kernels: sgl-kernel's RMSNorm, activation and rotary); the attention backend
(:data:`~.sglang_args.FUSED_ATTENTION` says which and why); the shared 2B-shaped model or
Qwen3-VL-8B-Thinking's shape (random weights, SGLang's dummy load). Like for like: a plugin job
and the stock job it is compared with differ only in the plugin.

Measured: generates of 8 text prompts × G = 8 (64 rows) and × G = 1 (8 rows), 128 steps, eos
ignored, bf16; after a warm-up generate of each size, 3 repeats each, every rate kept, the median
reported; the radix cache flushed before each. A rate is **decoding only**, on both sides alike:
the decode steps' tokens over the decode window the engine's scheduler logged
(:func:`~soft_spatial.compat.sglang.time_scheduler_phases`: from the first decode step's start
to the last one's end), so neither the prompts' prefill (the plugin's prefill-only round
included) nor the plugin's split of the records into traces after the generate is timed; beside
it the median host µs of a decode step outside the forward. With ``profile`` the job ends with
one generate of 64 rows under ``torch.profiler`` in the scheduler (SGLang's own
``start_profile``/``stop_profile``), summarised by :mod:`.profile`: where a decode step's time
goes. The first engine
of a kind on a machine runs slower (Triton's JIT, cold caches: 52 s to start against 28–32 s, and
~18% slower decoding in the records), so the first job of each kind (kernels, attention, dtype,
model) starts and stops a **warm-up engine** first (a marker in the scratch directory remembers
it for later calls on the same machine). Each job reports how many decode batches replayed a CUDA
graph and how many ran eagerly, counted in SGLang's scheduler processes. A dry run does the same
with the tiny model on the CPU (2 prompts, 8 steps, once; SGLang captures no graphs there) and
starts no warm-up engine: a CPU engine has no JIT and every kind shares its caches, so a warm-up
engine would only repeat the measured engine's start-up, through the same calls
(:func:`engine`, then a generate); which jobs start one on a device is unit-tested
(tests/bench/gpu/test_graphs.py).
"""
from __future__ import annotations

import statistics
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field

from soft_spatial.compat.sglang import GRAPH_LOG_ENV, PHASE_LOG_ENV, read_graph_log, read_phase_log
from soft_spatial_bench.gpu.context import (KitContext, env_vars, free_memory, model_8b,
                                          shared_model, wait_device_free)
from soft_spatial_bench.gpu.measure import MODES
from soft_spatial_bench.gpu.prompts import text_prompts
from soft_spatial_bench.gpu.report import JobFailed, table
from soft_spatial_bench.gpu.sglang_args import (FUSED_ATTENTION, cpu_args, cuda_args, engine_env,
                                              unset_backends)
from soft_spatial.models.shapes import QWEN3_VL_2B_TEXT

__all__ = ["EngineSpec", "FResult", "SyncResult", "measure", "render", "render_profile",
           "decode_window", "profile_pass", "server_args", "shape", "warm_up", "measure_sync",
           "render_sync", "plugin_engine", "engine"]


@dataclass(frozen=True)
class EngineSpec:
    """What one F job starts (module docstring)."""

    kind: str  # "stock" | "plugin"
    mode: str = "hard"
    graphs: bool = True
    overlap: bool = False
    kernels: str = "native"  # "native" | "fused"
    model: str = "2b"  # "2b" | "8b"
    attention_backend: str | None = None  # default: Triton (FUSED_ATTENTION); "flashinfer"

    def __post_init__(self):
        if self.kind not in ("stock", "plugin") or (self.kind == "stock" and self.mode != "hard"):
            raise ValueError(f"EngineSpec: {self.kind} {self.mode}: stock engines decode hard only")
        if self.kernels not in ("native", "fused") or self.model not in ("2b", "8b"):
            raise ValueError(f"EngineSpec: kernels {self.kernels!r}, model {self.model!r}")

    @classmethod
    def from_args(cls, a: dict) -> "EngineSpec":
        return cls(a["engine"], a["mode"], a.get("graphs", True), a.get("overlap", False),
                   a.get("kernels", "native"), a.get("model", "2b"), a.get("attention"))

    @property
    def attention(self) -> str:
        if self.attention_backend:
            return self.attention_backend
        return FUSED_ATTENTION if self.kernels == "fused" else "triton"



@dataclass
class FResult:
    """An F job's result: what ran (``engine``: "stock hard", "plugin fixed", ...); at 64
    (``big``) and 8 (``small``) rows the median rate, every repeat's, the host µs of a step."""

    engine: str
    graphs: bool
    overlap: bool
    kernels: str
    attention: str
    model: str
    steps: int
    repeats: int
    warmup_engine_s: float | None = None
    start_s: float | None = None
    rows: dict = field(default_factory=dict)
    tps_big: float | None = None
    tps_big_all: list = field(default_factory=list)
    host_us_big: float | None = None
    tps_small: float | None = None
    tps_small_all: list = field(default_factory=list)
    host_us_small: float | None = None
    soft_step_fraction: float | None = None  # the plugin's
    profile: dict | None = None
    graph_batches: dict | None = None
    free_after: float | None = None


def shape(dry: bool) -> tuple[int, int, int, int]:
    """(prompts, G of the big batch, steps, repeats)."""
    return (2, 2, 8, 1) if dry else (8, 8, 128, 3)


def server_args(spec: EngineSpec, dry: bool) -> dict:
    """The engine's SGLang server arguments (CUDA: every backend named, refused otherwise)."""
    if dry:
        args = cpu_args(disable_overlap_schedule=not spec.overlap)
        return dict(args, load_format="dummy") if spec.model == "8b" else args
    args = cuda_args("bfloat16", graphs=spec.graphs, plugin=spec.kind == "plugin",
                     overlap=spec.overlap, attention=spec.attention, dummy=spec.model == "8b")
    missing = unset_backends(args, plugin=spec.kind == "plugin")
    if missing:
        raise ValueError(f"server arguments leave backends to SGLang's defaults: {missing}")
    return args


def plugin_engine(model, mode: str, ctrl, args: dict):
    """The plugin's engine, fixed-length decoding (eos ignored: every engine runs the same
    steps)."""
    from soft_spatial.engines.sglang.engine import SGLangEngine
    from soft_spatial.softthink import SoftThinkingConfig
    eng = SGLangEngine(model, SoftThinkingConfig(mode=mode),
                       controller=ctrl if mode == "adaptsoft" else None, server_args=args)
    eng.eos_ids = []
    return eng


class _Stock:
    """SGLang's own offline engine (no plugin): hard decoding, the baseline to reach."""

    def __init__(self, model, args: dict):
        from soft_spatial.compat.sglang import launch_engine, native_scheduler_process
        self.backend = launch_engine(native_scheduler_process, model_path=str(model), **args)

    def tokens(self, prompts, n: int, steps: int) -> tuple[int, int]:
        rows = [p for p in prompts for _ in range(n)]
        tag = uuid.uuid4().hex[:12]  # named as the plugin's are (soft-<tag>-...), not SGLang's uuids
        outs = self.backend.generate(input_ids=rows, sampling_params=dict(
            max_new_tokens=steps, temperature=1.0, ignore_eos=True),
            rid=[f"stock-{tag}-{i}" for i in range(len(rows))])
        return sum(o["meta_info"]["completion_tokens"] for o in outs), 0

    def close(self) -> None:
        self.backend.shutdown()


class _Plugin:
    def __init__(self, model, mode: str, ctrl, args: dict):
        from soft_spatial.softthink import SoftThinkingConfig
        self.eng = plugin_engine(model, mode, ctrl, args)
        self.backend, self.conf = self.eng.backend, SoftThinkingConfig(mode=mode)

    def tokens(self, prompts, n: int, steps: int) -> tuple[int, int]:
        """(tokens, soft steps) of one generate."""
        from soft_spatial.softthink import SamplingConfig
        outs = self.eng.generate(prompts, soft_thinking=self.conf, n=n, seed=1,
                                 sampling=SamplingConfig(temperature=1.0, max_new_tokens=steps))
        return (sum(len(o.token_ids) for o in outs), sum(int(o.trace.soft.sum()) for o in outs))

    def close(self) -> None:
        self.eng.close()


@contextmanager
def engine(ctx: KitContext, spec: EngineSpec, graph_log=None, phase_log=None):
    """A started engine of ``spec`` on its model; shut down and its memory back on exit.
    ``graph_log``/``phase_log``: directories its schedulers count graph replays and log decode
    steps into."""
    model, ctrl, _ = (model_8b if spec.model == "8b" else shared_model)(ctx)
    args = server_args(spec, ctx.dry_run)
    env = engine_env(parity=False, native_ops=spec.kernels == "native",
                     flashinfer=spec.attention == "flashinfer" and not ctx.dry_run)
    logs = {**({GRAPH_LOG_ENV: str(graph_log)} if graph_log else {}),
            **({PHASE_LOG_ENV: str(phase_log)} if phase_log else {})}
    with env_vars({**env, **logs}):
        eng = (_Plugin(model, spec.mode, ctrl, args) if spec.kind == "plugin"
               else _Stock(model, args))
    try:
        yield eng, model
    finally:
        eng.close()
        free_memory()
        if not ctx.dry_run:
            wait_device_free()


def _warm_marker(ctx: KitContext, spec: EngineSpec):
    """What one warm-up engine warms: a kind (kernels, attention, model) on a device."""
    return ctx.work / "warm" / f"{spec.kernels}-{spec.attention}-{spec.model}"


def warm_up(ctx: KitContext, spec: EngineSpec) -> float | None:
    """Start, use and stop one engine of ``spec``'s kind unless one ran on this machine (its
    marker): Triton's JIT and the caches are then warm for the measured engine. Returns its
    seconds, or None when the kind was warm, and on a dry run, where every kind is (module
    docstring)."""
    marker = _warm_marker(ctx, spec)
    if ctx.dry_run or marker.exists():
        return None
    t0 = time.perf_counter()
    from transformers import AutoTokenizer
    with engine(ctx, spec) as (eng, model):
        n, g, steps, _ = shape(ctx.dry_run)
        prompts = text_prompts(AutoTokenizer.from_pretrained(model), n, 4 if ctx.dry_run else 16)
        eng.tokens(prompts, g, 8)
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.touch()
    return round(time.perf_counter() - t0, 1)


def decode_window(phase_log, t0: float, t1: float, steps: int, settle_s: float = 5.0) -> dict:
    """The decode steps the scheduler logged between ``t0`` and ``t1`` (``time.monotonic``):
    ``{"tokens": rows summed, "seconds": first start to last end, "host_us": median host µs
    outside the forward}``. A generate of ``steps`` tokens has ``steps - 1`` decode steps; the
    last one's line may land just after the generate returned, so this waits up to
    ``settle_s`` for them."""
    deadline = time.monotonic() + settle_s
    while True:
        rows = [r for r in read_phase_log(str(phase_log)) if t0 <= r["start"] <= t1]
        if len(rows) >= steps - 1 or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    if not rows:
        return {"tokens": 0, "seconds": 0.0, "host_us": None}
    host = [r["schedule"] + r["run"] - r["forward"] + r["process"] for r in rows]
    return {"tokens": sum(r["bs"] for r in rows), "seconds": max(r["end"] for r in rows)
            - min(r["start"] for r in rows), "host_us": statistics.median(host)}


def _rates(r: FResult, eng, prompts, n_prompts: int, g: int, phase_log) -> None:
    """Into ``r``: decoding tok/s (:func:`decode_window`) of every repeat at both sizes after a
    warm-up generate of each; host µs of a decode step outside the forward; soft steps."""
    soft, total, steps = 0, 0, r.steps
    r.rows = {"big": n_prompts * g, "small": n_prompts}
    for size, per_prompt in (("big", g), ("small", 1)):
        eng.tokens(prompts, per_prompt, min(steps, 16))  # the sizes' graphs and kernels, once
        rates, hosts = [], []
        for _ in range(r.repeats):
            eng.backend.flush_cache()
            t1 = time.monotonic()
            tokens, s = eng.tokens(prompts, per_prompt, steps)
            window = decode_window(phase_log, t1, time.monotonic(), steps)
            rates.append(window["tokens"] / window["seconds"] if window["seconds"] else 0.0)
            hosts.append(window["host_us"])
            soft, total = soft + s, total + tokens
        known = [h for h in hosts if h is not None]
        setattr(r, f"tps_{size}", round(statistics.median(rates), 1))
        setattr(r, f"tps_{size}_all", [round(x, 1) for x in rates])
        setattr(r, f"host_us_{size}", round(statistics.median(known), 1) if known else None)
    if r.engine.startswith("plugin"):
        r.soft_step_fraction = round(soft / max(total, 1), 4)


def profile_pass(ctx: KitContext, eng, prompts, g: int, name: str) -> dict:
    """One generate of ``len(prompts) * g`` rows under ``torch.profiler`` in the scheduler
    (SGLang's ``start_profile``/``stop_profile``: CPU and GPU activity, no stacks or shapes),
    summarised (:func:`.profile.summarize`)."""
    from soft_spatial_bench.gpu.profile import read_trace, summarize
    out_dir = ctx.work / "profiles" / f"{name}-{time.time_ns()}"
    steps = 8 if ctx.dry_run else 24
    eng.backend.flush_cache()
    eng.backend.start_profile(output_dir=str(out_dir), with_stack=False, record_shapes=False,
                              activities=["CPU"] if ctx.dry_run else ["CPU", "GPU"])
    try:
        eng.tokens(prompts, g, steps)
    finally:
        eng.backend.stop_profile()
    traces = sorted(out_dir.glob("*.trace.json*"))
    if not traces:
        raise JobFailed(f"the profile pass wrote no trace into {out_dir}", {})
    return summarize(read_trace(traces[0]))


def measure(ctx: KitContext, job) -> FResult:
    """One F job: the warm-up engine if its kind is cold, then the measured engine."""
    from transformers import AutoTokenizer
    spec = EngineSpec.from_args(job.args)
    n_prompts, g, steps, repeats = shape(ctx.dry_run)
    r = FResult(f"{spec.kind} {spec.mode}", spec.graphs, spec.overlap, spec.kernels,
                spec.attention, spec.model, steps, repeats, warm_up(ctx, spec))
    stamp_ns = time.time_ns()
    graph_log = ctx.work / "graph-logs" / f"{job.name}-{stamp_ns}"
    phase_log = ctx.work / "phase-logs" / f"{job.name}-{stamp_ns}"
    t0 = time.perf_counter()
    try:
        with engine(ctx, spec, graph_log, phase_log) as (eng, model):
            r.start_s = round(time.perf_counter() - t0, 1)
            prompts = text_prompts(AutoTokenizer.from_pretrained(model), n_prompts,
                                   4 if ctx.dry_run else 16)
            _rates(r, eng, prompts, n_prompts, g, phase_log)
            if job.args.get("profile"):
                r.profile = profile_pass(ctx, eng, prompts, g, job.name)
    except Exception as e:
        r.graph_batches = read_graph_log(str(graph_log))
        raise JobFailed(f"{type(e).__name__}: {e}", r) from e
    r.graph_batches = read_graph_log(str(graph_log))  # none on a CPU
    r.free_after = None if ctx.dry_run else round(wait_device_free(), 3)
    return r


def render(r: FResult) -> list[str]:
    g = r.graph_batches or {"replayed": "–", "eager": "–", "first_eager": None}
    rates = ", ".join(f"{r.rows[n]} rows {getattr(r, f'tps_{n}')} tok/s decoding (repeats "
                      f"{getattr(r, f'tps_{n}_all')}; host {getattr(r, f'host_us_{n}')} µs a "
                      f"step outside the forward)" for n in ("big", "small")
                      if getattr(r, f"tps_{n}") is not None)
    warm = r.warmup_engine_s
    return [f"{r.engine} on the {r.model.upper()}-shaped model: {r.kernels} "
            f"kernels, attention {r.attention}, overlap {'on' if r.overlap else 'off'}, "
            f"graphs {'on' if r.graphs else 'off'} (decode batches replayed: "
            f"{g['replayed']}, eager: {g['eager']}"
            + (f"; first eager: {g['first_eager']}" if g.get("first_eager") else "") + "); "
            + (f"a warm-up engine first ({warm} s); " if warm else "its kind was warm; ")
            + f"started in {r.start_s if r.start_s is not None else '–'} s; " + (rates or "no rate")
            + (f"; soft steps {r.soft_step_fraction:.0%}" if r.soft_step_fraction is not None
               else "")] + (render_profile(r.profile) if r.profile else [])


def render_profile(p: dict) -> list[str]:
    """The profile pass's summary (:func:`.profile.summarize`) as report lines."""
    if not p.get("steps"):
        return ["", "Profile: no decode step in the trace."]
    host = ", ".join(f"{k} {u}" for k, u in p["host_us"].items())
    return ["", f"Profile, per decode step over {p['steps']} steps: {p['step_us']} µs a step; "
                f"GPU busy {p['gpu_busy_us']} µs, idle {p['gpu_idle_us']} µs; "
                f"{p['graph_launches']} graph launches, {p['kernels_outside_graphs']} kernels "
                f"outside graphs ({p['outside_us']} µs); host µs (median) {host}", "",
            *table(["kernel", "calls", "µs", "graph"],
                   [[t["kernel"], t["calls"], t["us"], "yes" if t["in_graph"] else "no"]
                    for t in p["top"]])]


# -- X/sync: the soft sampler never waits for the device ------------------------------------------
@dataclass
class SyncResult:
    """X/sync's result: per mode (``"fixed, graphs"``, ...) the rows sampled and the op that
    waited (None: none); ``waits``: the modes that waited."""

    device: str
    vocab: int
    hidden: int
    modes: dict
    waits: list


def measure_sync(ctx: KitContext, job) -> SyncResult:
    """The soft sampler (``SoftRuntime.sample``) driven as SGLang drives it, under
    ``torch.cuda.set_sync_debug_mode("error")`` on a GPU (meta tensors in a dry run): the modes
    whose sampler waits (none expected)."""
    from soft_spatial_bench.gpu.sampler_sync import drive_sampler
    if ctx.dry_run:
        dev, vocab, hidden = "meta", 97, 16
    else:  # the Qwen vocabulary and the 2B shape's width
        dev, vocab, hidden = "cuda", 151936, QWEN3_VL_2B_TEXT["hidden_size"]
    rows = {}
    # the decode steps eagerly, then (on a GPU) through the sampler's captured graphs
    for mode, graphs in [(m, False) for m in MODES] + [(m, True) for m in MODES if dev == "cuda"]:
        name = f"{mode}, graphs" if graphs else mode
        try:
            rows[name] = {"rows": drive_sampler(dev, mode, vocab=vocab, hidden=hidden,
                                                graphs=graphs), "waits": None}
        except Exception as e:  # the synchronising op, named by torch
            rows[name] = {"rows": None,
                          "waits": f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"}
    r = SyncResult(dev, vocab, hidden, rows, [m for m, x in rows.items() if x["waits"]])
    if r.waits:
        raise JobFailed(f"the soft sampler waits for the device in {r.waits}", r)
    return r


def render_sync(r: SyncResult) -> list[str]:
    check = ("meta tensors (any host read raises)" if r.device == "meta" else
             'torch.cuda.set_sync_debug_mode("error")')
    return [f"Soft sampler waits for the device? (SoftRuntime.sample, vocabulary {r.vocab}, "
            f"hidden {r.hidden}, on {r.device}, checked by {check}):", "",
            *table(["mode", "rows sampled", "synchronising op"],
                   [[m, x["rows"] if x["rows"] is not None else "–", x["waits"] or "none"]
                    for m, x in r.modes.items()])]
