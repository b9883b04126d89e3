"""F — soft decoding at hard speed: one SGLang engine's decode throughput (the headline plan's F
jobs and extras; ``scripts/gpu/stage_f.py`` is the older whole-stage form).

One engine per job, on the shared 2B-shaped model (:func:`~.context.shared_model`): stock SGLang
(no plugin: hard decoding, PyTorch sampling) or the plugin in ``hard``, ``fixed`` or
``adaptsoft``; CUDA graphs on or off; overlap scheduling on or off; native ops or SGLang's fused
kernels. It measures whole generates of 8 text prompts × G = 8 (64 rows) and × G = 1 (8 rows),
128 steps, eos ignored, bf16, one warm-up then the median of 3 (prompt prefill included; the radix
cache flushed before each). A dry run does the same with the tiny model on the CPU (2 prompts,
8 steps, once; SGLang captures no graphs there).
"""
from __future__ import annotations

import statistics
import time

from soft_spatial.lab.gpu.context import (KitContext, env_vars, free_memory, shared_model,
                                          wait_device_free)
from soft_spatial.lab.gpu.prompts import text_prompts
from soft_spatial.lab.gpu.sglang_args import cpu_args, cuda_args, engine_env, unset_backends

__all__ = ["EngineSpec", "engine_throughput", "server_args", "shape"]


class EngineSpec:
    """What one F job starts: ``kind`` "stock" or "plugin", ``mode``, CUDA ``graphs``,
    ``overlap`` scheduling, ``native`` ops."""

    def __init__(self, kind: str, mode: str = "hard", graphs: bool = True, overlap: bool = False,
                 native: bool = True):
        if kind not in ("stock", "plugin") or (kind == "stock" and mode != "hard"):
            raise ValueError(f"EngineSpec: {kind} {mode}: stock engines decode hard only")
        self.kind, self.mode, self.graphs, self.overlap, self.native = (kind, mode, graphs, overlap,
                                                                        native)

    def describe(self) -> dict:
        return {"engine": f"{self.kind} {self.mode}", "graphs": self.graphs,
                "overlap": self.overlap, "native_ops": self.native}


def shape(dry: bool) -> tuple[int, int, int, int]:
    """(prompts, G of the big batch, steps, repeats)."""
    return (2, 2, 8, 1) if dry else (8, 8, 128, 3)


def server_args(spec: EngineSpec, dry: bool) -> dict:
    """The engine's SGLang server arguments (CUDA: every backend named, refused otherwise)."""
    if dry:
        return cpu_args(disable_overlap_schedule=not spec.overlap)
    args = cuda_args("bfloat16", graphs=spec.graphs, plugin=spec.kind == "plugin",
                     overlap=spec.overlap)
    missing = unset_backends(args, plugin=spec.kind == "plugin")
    if missing:
        raise ValueError(f"server arguments leave backends to SGLang's defaults: {missing}")
    return args


def _stock_engine(model, args: dict):
    from soft_spatial.compat.sglang import launch_engine, native_scheduler_process
    return launch_engine(native_scheduler_process, model_path=str(model), **args)


def engine_throughput(ctx: KitContext, spec: EngineSpec) -> tuple[dict, list[str]]:
    """Start the engine, measure both batches, shut it down. Returns (values, report lines)."""
    from transformers import AutoTokenizer

    from soft_spatial.engines.sglang.engine import SGLangEngine
    from soft_spatial.softthink import SamplingConfig, SoftThinkingConfig

    dry = ctx.dry_run
    model, ctrl, _ = shared_model(ctx)
    n_prompts, g, steps, repeats = shape(dry)
    prompts = text_prompts(AutoTokenizer.from_pretrained(model), n_prompts, 4 if dry else 16)
    plugin = spec.kind == "plugin"
    args = server_args(spec, dry)
    t0 = time.perf_counter()
    with env_vars(engine_env(parity=False, native_ops=spec.native)):
        if plugin:
            eng = SGLangEngine(model, SoftThinkingConfig(mode=spec.mode),
                               controller=ctrl if spec.mode == "adaptsoft" else None,
                               server_args=args)
            eng.eos_ids = []  # fixed-length decoding: every engine runs the same steps
            backend = eng.backend
        else:
            eng = backend = _stock_engine(model, args)
    start_s = time.perf_counter() - t0
    conf = SoftThinkingConfig(mode=spec.mode)
    soft_steps = [0, 0]

    def generate(rows_per_prompt: int, n_steps: int, batch) -> int:
        if not plugin:
            rows = [p for p in batch for _ in range(rows_per_prompt)]
            outs = backend.generate(input_ids=rows, sampling_params=dict(
                max_new_tokens=n_steps, temperature=1.0, ignore_eos=True))
            return sum(o["meta_info"]["completion_tokens"] for o in outs)
        outs = eng.generate(batch, soft_thinking=conf, n=rows_per_prompt, seed=1,
                            sampling=SamplingConfig(temperature=1.0, max_new_tokens=n_steps))
        soft_steps[0] += sum(int(o.trace.soft.sum()) for o in outs)
        soft_steps[1] += sum(len(o.token_ids) for o in outs)
        return sum(len(o.token_ids) for o in outs)

    values = {**spec.describe(), "start_s": round(start_s, 1), "steps": steps,
              "repeats": repeats, "attention": args.get("attention_backend")}
    try:
        generate(1, 4, prompts[:1])  # warm-up (the graph runner's one recapture, Triton's JIT)
        values["rows"] = {"big": n_prompts * g, "small": n_prompts}
        for size, rows, per_prompt in (("big", n_prompts * g, g), ("small", n_prompts, 1)):
            rates = []
            for _ in range(repeats):
                backend.flush_cache()
                t1 = time.perf_counter()
                tokens = generate(per_prompt, steps, prompts)
                rates.append(tokens / (time.perf_counter() - t1))
            values[f"tps_{size}"] = round(statistics.median(rates), 1)
            values[f"tps_{size}_all"] = [round(r, 1) for r in rates]
    finally:
        (eng.close() if plugin else backend.shutdown())
        free_memory()
        if not dry:
            values["free_after"] = round(wait_device_free(), 3)
    if plugin:
        values["soft_step_fraction"] = round(soft_steps[0] / max(soft_steps[1], 1), 4)
    lines = [f"{values['engine']}: graphs {'on' if spec.graphs and not dry else 'off'}, "
             f"overlap {'on' if spec.overlap else 'off'}, "
             f"{'native ops' if spec.native else 'fused kernels'}; started in {start_s:.0f} s; "
             + ", ".join(f"{values['rows'][size]} rows {values[f'tps_{size}']} tok/s"
                         for size in ("big", "small") if f"tps_{size}" in values)]
    return values, lines
