"""D and G — soft parity on CUDA at the 2B shape: SGLang in fp32 against the embedded engine's fp32
and fp64 runs of the same weights, prompts and seeds (the headline plan's D and G jobs; the bound
is docs/sglang.md's, applied per row by :func:`~.parity.row_verdicts`).

Two kinds of job: ``refs`` runs the embedded engine (``LocalEngine``) in fp32 and fp64 for the
asked modes and stores the completions as JSON in the scratch directory; ``parity`` starts one
SGLang engine in fp32 (native ops, TF32 off everywhere: :func:`~.sglang_args.engine_env`),
generates the same rows and gives each row its verdict, the first divergence and the per-step
|Δ| of three pairs.

* **D** (graphs off): attention ``torch_native`` (its dots are exact fp32; SGLang turns graphs
  off with it).
* **G** (graphs on, the plugin's decode inside SGLang's captured graphs): attention ``triton``
  with ``TRITON_F32_DEFAULT=ieee`` (its dots in IEEE fp32, not TF32) and a fixed number of KV
  splits (``SGLANG_TRITON_DECODE_ATTN_STATIC_KV_SPLITS=1``: the split, so the rounding, does not
  depend on the batch size a graph pads to). The bound is D's, for the same reason it holds
  there: every engine computes the same fp32 functions in another summation order, so its
  per-step difference from the fp64 run is of the order of the embedded engine's own fp32
  rounding (``ATOL``), amplified along the path no more than the embedded engine's own fp32 run
  is amplified (``AMPLIFICATION`` × max|local fp32 − fp64|). A graph replay changes only where
  the kernels read their inputs (static buffers), not what they compute, so a replay that reads
  a stale or wrong slot (a wrong mixture, a wrong position) breaks the bound by orders of
  magnitude (the embedding of another token differs at 1e-1), while a correct one stays within
  it. The report says how many decode batches replayed a graph: a G verdict with 0 replayed
  batches says nothing about graphs.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

from soft_spatial.compat.sglang import GRAPH_LOG_ENV, read_graph_log
from soft_spatial_bench.gpu import parity
from soft_spatial_bench.gpu.context import (KitContext, ModelFacts, env_vars, free_memory,
                                          shared_model, wait_device_free)
from soft_spatial_bench.gpu.prompts import image_prompts
from soft_spatial_bench.gpu.report import JobFailed, table
from soft_spatial_bench.gpu.sglang_args import cpu_args, cuda_args, engine_env, unset_backends

__all__ = ["RefsResult", "ParityResult", "measure_references", "render_references",
           "measure_parity", "render_parity", "server_args", "shape", "tf32_off",
           "STATIC_KV_SPLITS"]

SEED = 7
STATIC_KV_SPLITS = {"SGLANG_TRITON_DECODE_ATTN_STATIC_KV_SPLITS": "1"}


def shape(dry: bool) -> tuple[int, int, int, int]:
    """(prompts, samples per prompt, steps, image side)."""
    return (2, 2, 8, 64) if dry else (4, 2, 32, 224)


def _sampling(dry: bool):
    from soft_spatial.softthink import SamplingConfig
    return SamplingConfig(temperature=0.8, max_new_tokens=shape(dry)[2])


def tf32_off() -> None:
    """TF32 off in this process (matmul and cuDNN): the embedded engine's fp32 reference."""
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False


def _refs_path(ctx: KitContext, mode: str) -> Path:
    return ctx.work / f"d-refs-{mode}.json"


@dataclass
class RefsResult:
    """A references job's result: per mode the rows local fp32 kept on fp64's path; the shape
    (prompts, samples, steps, image side)."""

    modes: list
    seconds: float
    fp32_on_fp64_path: dict
    rows: int
    shape: list
    model: ModelFacts


def measure_references(ctx: KitContext, job) -> RefsResult:
    """The embedded engine's fp32 and fp64 runs for the job's modes, stored for the parity jobs."""
    from soft_spatial.softthink import AdaptSoft, SoftThinkingConfig
    modes = tuple(job.args["modes"])
    model, ctrl, facts = shared_model(ctx)
    n, g, steps, side = shape(ctx.dry_run)
    tf32_off()
    t0 = time.perf_counter()
    runs = parity.local_runs(model, ctx.device, {m: SoftThinkingConfig(mode=m) for m in modes},
                             image_prompts(n, side), _sampling(ctx.dry_run), g, seed=SEED,
                             controller=AdaptSoft.read_checkpoint(ctrl))
    free_memory()
    for m in modes:
        path = _refs_path(ctx, m)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps({k: parity.dump_completions(v) for k, v in runs[m].items()}))
        tmp.replace(path)
    on_path = {m: sum(parity.same_path(a, b) for a, b in zip(runs[m]["float32"],
                                                            runs[m]["float64"])) for m in modes}
    return RefsResult(list(modes), round(time.perf_counter() - t0, 1), on_path, n * g,
                      [n, g, steps, side], facts)


def render_references(r: RefsResult) -> list[str]:
    n, g, steps, side = r.shape
    return [f"Embedded engine (transformers, TF32 off) in fp32 and fp64 for "
            f"{', '.join(r.modes)}: {n} image prompts ({side}×{side}) × {g} samples, {steps} "
            f"steps, seed {SEED}, {r.seconds:.0f} s; local fp32 on fp64's path: "
            + ", ".join(f"{m} {c}/{r.rows}" for m, c in r.fp32_on_fp64_path.items())]


def server_args(dry: bool, graphs: bool) -> dict:
    """A parity engine's SGLang server arguments (CUDA: every backend named)."""
    if dry:
        return cpu_args()
    args = cuda_args("float32", graphs=graphs, plugin=True, parity=True)
    missing = unset_backends(args, plugin=True)
    if missing:
        raise ValueError(f"server arguments leave backends to SGLang's defaults: {missing}")
    return args


def _generate(ctx: KitContext, mode: str, graphs: bool, graph_log: Path) -> tuple[list, dict]:
    from soft_spatial.engines.sglang.engine import SGLangEngine
    from soft_spatial.softthink import SoftThinkingConfig
    model, ctrl, _ = shared_model(ctx)
    n, g, _, side = shape(ctx.dry_run)
    args = server_args(ctx.dry_run, graphs)
    conf = SoftThinkingConfig(mode=mode)
    env = {**engine_env(parity=True, native_ops=True), GRAPH_LOG_ENV: str(graph_log),
           **(STATIC_KV_SPLITS if graphs else {})}
    with env_vars(env):
        eng = SGLangEngine(model, conf, controller=ctrl if mode == "adaptsoft" else None,
                           server_args=args)
    try:
        eng.eos_ids = []  # fixed-length decoding: every engine runs the same steps
        if graphs:  # the graph runner's capture, Triton's JIT: before the rows compared
            eng.generate(image_prompts(1, side), soft_thinking=conf, seed=999,
                         sampling=_sampling(True))
        got = eng.generate(image_prompts(n, side), soft_thinking=conf, n=g, seed=SEED,
                           sampling=_sampling(ctx.dry_run))
    finally:
        eng.close()
        free_memory()
        if not ctx.dry_run:
            wait_device_free()
    return got, args


@dataclass
class ParityResult:
    """A D or G job's result: ``verdicts``, rows per status of :func:`~.parity.row_verdicts`
    (``bad_rows``: those beyond the bound); the diagnosis as report lines."""

    mode: str
    graphs: bool
    attention: str
    graph_batches: dict
    graphs_ran: str
    rows: int
    same_path_as_fp32: int
    verdicts: dict
    within_bound: int
    max_dev_vs_fp32: dict
    soft_step_fraction: float
    seconds: float
    passed: bool
    shape: list
    bad_rows: list
    diagnosis: list


def measure_parity(ctx: KitContext, job) -> ParityResult:
    """SGLang in fp32 for the job's mode (graphs off: D; on: G) against the stored references."""
    mode, graphs = job.args["mode"], bool(job.args.get("graphs", False))
    path = _refs_path(ctx, mode)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no embedded-engine references for {mode} (its "
                                f"references job did not finish)")
    refs = {k: parity.load_completions(v) for k, v in json.loads(path.read_text()).items()}
    want, ref = refs["float32"], refs["float64"]
    t0 = time.perf_counter()
    graph_log = ctx.work / "graph-logs" / f"{job.part}-{mode}-{time.time_ns()}"
    got, args = _generate(ctx, mode, graphs, graph_log)
    verdicts, count, same, dev = parity.summarize(got, want, ref)
    soft = sum(int(c.trace.soft.sum()) for c in got) / max(sum(len(c.token_ids) for c in got), 1)
    g = read_graph_log(str(graph_log))
    r = ParityResult(
        mode, graphs, args["attention_backend"], g, _graphs_ran(graphs, g, ctx.dry_run), len(ref),
        len(same), count, count["ok"] + count["ill-conditioned"],
        {k: (None if v != v else v) for k, v in dev.items()}, round(soft, 4),
        round(time.perf_counter() - t0, 1), not (count["path"] or count["bound"]),
        list(shape(ctx.dry_run)),
        [dict(v, row=i) for i, v in enumerate(verdicts) if v["status"] == "bound"],
        _diagnosis(got, want, ref))
    if not r.passed:
        raise JobFailed(f"{count['path']} rows off the path, {count['bound']} beyond the bound", r)
    return r


def _graphs_ran(asked: bool, g: dict, dry: bool) -> str:
    if not asked:
        return "off"
    if dry:
        return "off (CPU: SGLang captures no CUDA graph)"
    return f"on ({g['replayed']} batches replayed, {g['eager']} eager)"


def _diagnosis(got, want, ref) -> list[str]:
    """The first difference beyond ATOL and the per-step |Δ| of the three pairs, as lines."""
    out = [f"- first difference beyond {parity.ATOL:g}, SGLang against local fp64: "
           + parity.describe(parity.first_divergence(got, ref, parity.ATOL), ("SGLang", "fp64"))]
    for title, a, b, names in (("SGLang against local fp32", got, want, ("SGLang", "fp32")),
                               ("SGLang against local fp64", got, ref, ("SGLang", "fp64")),
                               ("local fp32 against local fp64", want, ref, ("fp32", "fp64"))):
        first = parity.describe(parity.first_divergence(a, b, float("inf")), names)
        same = sum(parity.same_path(x, y) for x, y in zip(a, b))
        out += [f"- {title}: {same}/{len(b)} rows on the same path; first path divergence: "
                f"{first}"]
        out += [f"  - max \\|Δ {f}\\| per step: {parity.curve(v, 1)}"
                for f, v in parity.per_step_deltas(a, b).items()]
    return out


def render_parity(v: ParityResult) -> list[str]:
    n, g, steps, _ = v.shape
    c, dev = v.verdicts, v.max_dev_vs_fp32
    lines = [f"**{v.mode}** (SGLang fp32: attention {v.attention}, CUDA graphs "
             f"{v.graphs_ran}, native ops, TF32 off; {n} image prompts × {g}, {steps} steps, "
             f"seed {SEED}; soft steps {v.soft_step_fraction:.0%}): {c['ok']} ok, "
             f"{c['ill-conditioned']} ill-conditioned (local fp32 leaves fp64's path), "
             f"{c['path']} off the path, {c['bound']} beyond the bound (max\\|SGLang − fp64\\| ≤ "
             f"{parity.ATOL:g} + {parity.AMPLIFICATION:g}·max\\|fp32 − fp64\\|)", ""]
    lines += table(["same path as local fp32", "max \\|Δ loglik\\|", "max \\|Δ scores\\|",
                    "max \\|Δ τ\\|", "within the bound"],
                   [[f"{v.same_path_as_fp32}/{v.rows}", dev["loglik"], dev["scores"],
                     dev["tau"] if v.mode == "adaptsoft" else "–", f"{v.within_bound}/{v.rows}"]])
    lines += [""] + [f"- row {b['row']}: {b['field']} max\\|Δ\\| {b['dev']:.3g} > bound "
                     f"{b['bound']:.3g} over {b['steps']} steps" for b in v.bad_rows]
    return lines + v.diagnosis
