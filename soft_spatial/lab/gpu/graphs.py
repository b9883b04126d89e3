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

import argparse
import os
import sys
import tempfile
from pathlib import Path

from soft_spatial.compat.sglang import GRAPH_LOG_ENV, read_graph_log
from soft_spatial.lab.bench import random_controller
from soft_spatial.lab.gpu.measure import MODES, Ctx, Report, timed, versions
from soft_spatial.lab.gpu.prompts import image_prompts
from soft_spatial.lab.gpu.report import Skip, StageFailed, table
from soft_spatial.lab.gpu.sampler_sync import drive_sampler
from soft_spatial.models.shapes import QWEN3_VL_2B_TEXT, QWEN3_VL_2B_VISION
from soft_spatial.lab.gpu.context import (KitContext, env_vars, free_memory, shared_model,
                                          wait_device_free)
from soft_spatial.lab.gpu.prompts import text_prompts
from soft_spatial.lab.gpu.sglang_args import cpu_args, cuda_args, engine_env, unset_backends

__all__ = ["EngineSpec", "engine_throughput", "server_args", "shape", "stage_f", "main"]


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
    graph_log = ctx.work / "graph-logs" / f"{spec.kind}-{spec.mode}-{time.time_ns()}"
    t0 = time.perf_counter()
    with env_vars({**engine_env(parity=False, native_ops=spec.native),
                   GRAPH_LOG_ENV: str(graph_log)}):
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
    # whether decode batches replayed a graph (counted in the schedulers; none on a CPU)
    values["graph_batches"] = read_graph_log(str(graph_log))
    g = values["graph_batches"]
    lines = [f"{values['engine']}: graphs {'on' if spec.graphs and not dry else 'off'} "
             f"(decode batches that replayed a graph: ≥ {g['replayed']}, eagerly: ≥ {g['eager']}"
             + (f"; first eager: {g['first_eager']}" if g["first_eager"] else "") + "), "
             f"overlap {'on' if spec.overlap else 'off'}, "
             f"{'native ops' if spec.native else 'fused kernels'}; started in {start_s:.0f} s; "
             + ", ".join(f"{values['rows'][size]} rows {values[f'tps_{size}']} tok/s"
                         for size in ("big", "small") if f"tps_{size}" in values)]
    return values, lines


# -- stage f (``check.py --stages f``, ``scripts/gpu/stage_f.py``) --------------------------------
STAGE_F_DOC = """GPU kit stage f: soft decoding under SGLang's CUDA graphs (issue 26), in one run on one GPU.

    python3 scripts/gpu/check.py --stages f            # from the kit (report: gpu-report.md)
    python3 scripts/gpu/stage_f.py --parts parity      # one part alone (the 10-minute limit)
    python scripts/gpu/stage_f.py --dry-run            # the logic on the CPU, tiny sizes

  sync        no SGLang needed: the soft sampler (SoftRuntime.sample) on the model's vocabulary
              and hidden size, a prefill with a chunked row, two sampling settings, decodes,
              requests joining and leaving, every call under
              torch.cuda.set_sync_debug_mode("error"): nothing in it may wait for the device
              (under overlap scheduling SGLang processes the previous batch meanwhile). The dry
              run checks the same on the meta device (soft_spatial/lab/gpu/sampler_sync.py).
Same Qwen3-VL-2B-shaped model as stage d (check.py's shape, random weights):
  throughput  bf16, eos ignored, 8 text prompts × G=8 (64 rows) and × G=1 (8 rows), 128 steps:
              stock SGLang hard with CUDA graphs; the plugin in hard, fixed and adaptsoft with
              graphs on and off. Ratios: fixed and adaptsoft graphs-on ÷ stock hard graphs-on
              (goal ≥ 0.9) and ÷ plugin hard graphs-on (goal ≥ 0.95).
  parity      fp32, every mode, graphs on vs off on the same weights, prompts and seeds:
              tokens, candidates, weights, τ, log-likelihoods, with the first differing
              row/step/field, rows alone and batched, each next to SGLang's own run-to-run
              control (graphs off twice); the stage fails where graphs on differ beyond it.
  overlap     the plugin with SGLang's overlap scheduling on vs off (graphs as on the device):
              throughput (bf16, 64 rows) per mode, and fp32 parity with the radix cache off
              (with it on, a sample's first decode reads another rounding of its shared prompt's
              KV under overlap: docs/sglang.md, "Overlap scheduling") of token-id prompts
              batched (one message: the same prefill grouping every run) and every row alone,
              next to the run-to-run control (overlap off twice); the stage fails where overlap
              on leaves the control's decoding path or, on a GPU, differs beyond it.
On the CPU (``--dry-run``) SGLang captures no CUDA graph, so every graphs-on engine is skipped
(said in the report) and the same logic runs graphs-off against graphs-off; the overlap part
runs adaptsoft alone and times its parity engines (the logic once; every mode's overlap parity is
tests/sglang_real/test_real_engine_overlap.py).
"""
FIELDS = ("token_ids", "topk_ids", "soft", "weights", "tau", "loglik")
# Parity: a fixed number of KV splits in Triton's decode attention, so the split (and the
# rounding) does not depend on the batch size a graph pads to; TF32 off, native ops
PARITY_ENV = {"SGLANG_TRITON_DECODE_ATTN_STATIC_KV_SPLITS": "1",
              **engine_env(parity=True, native_ops=True)}
CPU_NO_GRAPHS = ("graphs-on engines skipped: SGLang 0.5.12 captures CUDA graphs only on CUDA "
                 "(its CPU graph runner, enable_torch_compile on device=cpu, needs the intel_amx "
                 "attention backend's init_cpu_graph_state and sgl-kernel's CPU build)")


def stage_server_args(ctx, dtype: str, graphs: bool, plugin: bool = True, **extra) -> dict:
    """Every backend named (soft_spatial.lab.gpu.sglang_args); ``extra`` overrides."""
    if ctx.device == "cpu":
        args = cpu_args(dtype=dtype, disable_cuda_graph=not graphs)
    else:
        args = cuda_args(dtype, graphs=graphs, plugin=plugin)
    args.update(extra)
    return args


def plugin_engine(model, mode: str, ctrl, args: dict):
    from soft_spatial.engines.sglang.engine import SGLangEngine
    from soft_spatial.softthink import SoftThinkingConfig
    eng = SGLangEngine(model, SoftThinkingConfig(mode=mode),
                       controller=ctrl if mode == "adaptsoft" else None, server_args=args)
    eng.eos_ids = []  # fixed-length decoding: every engine runs the same steps
    return eng


class StockEngine:
    """SGLang's own offline engine (no plugin): hard decoding, the baseline to reach."""

    def __init__(self, model, args: dict):
        from soft_spatial.compat.sglang import launch_engine, native_scheduler_process
        self.backend = launch_engine(native_scheduler_process, model_path=str(model), **args)

    def generate(self, prompts, n: int, steps: int) -> int:
        rows = [p for p in prompts for _ in range(n)]
        outs = self.backend.generate(input_ids=rows, sampling_params=dict(
            max_new_tokens=steps, temperature=1.0, ignore_eos=True))
        return sum(o["meta_info"]["completion_tokens"] for o in outs)

    def close(self) -> None:
        self.backend.shutdown()


def tokens_per_s(eng, prompts, n: int, steps: int, repeats: int) -> float:
    """Tokens per second of whole batched generates (prompt prefill included), median."""
    from soft_spatial.softthink import SamplingConfig, SoftThinkingConfig
    if isinstance(eng, StockEngine):
        eng.generate(prompts[:1], 1, 4)  # warm-up

        def run():
            eng.backend.flush_cache()
            return eng.generate(prompts, n, steps)
    else:
        conf = SoftThinkingConfig(mode=eng.soft_thinking.mode)
        eng.generate(prompts[:1], soft_thinking=conf, sampling=SamplingConfig(max_new_tokens=4))
        sampling = SamplingConfig(temperature=1.0, max_new_tokens=steps)

        def run():  # warm-up above: the graph runner's one recapture (hidden states LAST)
            eng.backend.flush_cache()
            outs = eng.generate(prompts, soft_thinking=conf, sampling=sampling, n=n, seed=1)
            return sum(len(o.token_ids) for o in outs)
    sec, _, tokens = timed(run, "cpu", repeats=repeats, warmup=0)  # returns when done
    return tokens / sec


def record_fields(out) -> dict:
    """Per-step values of one completion, by field (``weights``: the next step's mixture
    weights the records stand for)."""
    import torch

    from soft_spatial.softthink import record_weights
    tr = out.trace
    return {"token_ids": torch.tensor(out.token_ids), "topk_ids": tr.topk_ids, "soft": tr.soft,
            "weights": record_weights(tr.scores, tr.tau, tr.soft), "tau": tr.tau,
            "loglik": torch.tensor(out.logprobs)}


def first_difference(got, want) -> tuple[dict, str | None]:
    """(max |Δ| per field over all rows and steps, the first difference in row/step order as
    text or None when every field is equal bit for bit)."""
    import torch
    dev, first = dict.fromkeys(FIELDS, 0.0), None
    for row, (a, b) in enumerate(zip(got, want)):
        fa, fb = record_fields(a), record_fields(b)
        for step in range(max(len(fa["token_ids"]), len(fb["token_ids"]))):
            for f in FIELDS:
                x, y = fa[f][step:step + 1], fb[f][step:step + 1]
                if x.shape != y.shape:
                    first = first or f"row {row} step {step}: {f} missing on one side"
                    continue
                if not torch.equal(x, y):
                    d = float((x.double() - y.double()).abs().max())
                    dev[f] = max(dev[f], d)
                    first = first or (f"row {row} step {step} field {f}: "
                                      f"{x.squeeze(0).tolist()} vs {y.squeeze(0).tolist()}")
    if len(got) != len(want):
        first = first or f"{len(got)} rows vs {len(want)}"
    return dev, first


def summary(dev: dict, first: str | None) -> str:
    if first is None:
        return "exact"
    return ", ".join(f"Δ{f} {dev[f]:.2g}" for f in FIELDS if dev[f]) + f"; first: {first}"


def parity(ctx, model, ctrl, lines: list[str]) -> list[str]:
    """Graphs on vs off in fp32 per mode, every row alone and all rows batched; returns the
    comparisons whose differences exceed SGLang's own run-to-run control (graphs off twice) or
    leave the decoding path where the control does not.

    Two graphs-off runs of the same rows already differ by 1e-7..3e-4 on the CPU (SGLang's
    batches and prefill shapes depend on when requests reach the scheduler, fp32 rounding on the
    shapes), so "exact" cannot be asked of graphs on vs off without the control beside it."""
    from soft_spatial.softthink import SamplingConfig, SoftThinkingConfig
    cpu = ctx.device == "cpu"
    n, g, steps = (2, 2, 8) if ctx.dry_run else (4, 2, 32)
    prompts = image_prompts(n, 64 if ctx.dry_run else 224)
    sampling = SamplingConfig(temperature=0.8, max_new_tokens=steps)
    rows, bad = [], []

    def run(eng, conf, alone: bool):
        eng.backend.flush_cache()  # a cached prompt prefills in other shapes
        if alone:
            return [o for i, p in enumerate(prompts) for j in range(g) for o in eng.generate(
                [p], soft_thinking=conf, sampling=sampling, n=1, seed=100 * i + j)]
        return eng.generate(prompts, soft_thinking=conf, sampling=sampling, n=g, seed=7)

    with env_vars({} if cpu else PARITY_ENV):
        # the dry run checks the logic once, on the mode that takes every path of the sampler
        # (as overlap below; each mode's engine against the embedded one: stage d)
        for m in ("adaptsoft",) if ctx.dry_run else MODES:
            conf, outs = SoftThinkingConfig(mode=m), {}
            # (graphs, what) -> completions; on the CPU "graphs on" is a second graphs-off run
            plan = {False: [("off", "alone"), ("on", "alone"), ("off2", "alone"),
                            ("off", "batch"), ("on", "batch"), ("off2", "batch")]} if cpu else {
                True: [("on", "alone"), ("on", "batch")],
                False: [("off", "alone"), ("off2", "alone"), ("off", "batch"),
                        ("off2", "batch")]}
            for graphs, runs in plan.items():
                eng = plugin_engine(model, m, ctrl, stage_server_args(ctx, "float32", graphs))
                try:  # warm-up: the graphs' one recapture
                    eng.generate(prompts[:1], soft_thinking=conf,
                                 sampling=SamplingConfig(max_new_tokens=2), seed=999)
                    for side, what in runs:
                        outs[(side, what)] = run(eng, conf, what == "alone")
                finally:
                    eng.close()
            cells = [m]
            for what in ("alone", "batch"):
                test = first_difference(outs[("on", what)], outs[("off", what)])
                control = first_difference(outs[("off2", what)], outs[("off", what)])
                cells += [summary(*test), summary(*control)]
                path = ("token_ids", "topk_ids", "soft")
                if not cpu and test[1] is not None and (max(test[0].values()) > max(control[0].values())
                                            or any(test[0][f] and not control[0][f]
                                                   for f in path)):
                    bad.append(f"{m} ({what})")
            rows.append(cells)
    side = "a second graphs-off run (CPU: no graphs)" if cpu else "graphs on"
    lines += ["", f"Parity, {side} vs graphs off: fp32, {n} image prompts × {g} samples, {steps} "
              f"steps, same seeds, radix cache flushed, each engine warmed up; every row alone "
              f"and all {n * g} rows batched (padded graph batches), each next to SGLang's own "
              f"run-to-run control (graphs off twice)" + ("" if cpu else f"; env {PARITY_ENV}")
              + ":", ""]
    lines += table(["mode", "rows alone", "alone, graphs off twice", f"{n * g} rows batched",
                      "batched, graphs off twice"], rows)
    return bad


def stage_throughput(ctx, model, ctrl, lines: list[str]) -> dict:
    """Tokens/s per engine and batch; returns {(engine, graphs, rows): tok/s}."""
    from transformers import AutoTokenizer
    cpu, dry = ctx.device == "cpu", ctx.dry_run
    tok = AutoTokenizer.from_pretrained(model)
    n_prompts, g, steps = (2, 2, 8) if dry else (8, 8, 64 if ctx.quick else 128)
    prompts = text_prompts(tok, n_prompts, 4 if dry else 16)
    repeats = 1 if dry else 3
    dtype = "float32" if dry else "bfloat16"
    batches = {n_prompts * g: g, n_prompts: 1}  # rows -> samples per prompt
    graph_sides = (False,) if cpu else (True, False)
    tps = {}
    engines = [("stock", "hard")] + [("plugin", m) for m in MODES]
    for kind, m in engines:
        for graphs in ((not cpu,) if kind == "stock" else graph_sides):
            args = stage_server_args(ctx, dtype, graphs, plugin=kind == "plugin")
            with env_vars(engine_env(parity=False, native_ops=True)):
                eng = (StockEngine(model, args) if kind == "stock"
                       else plugin_engine(model, m, ctrl, args))
            try:
                for rows, n in batches.items():
                    tps[(f"{kind} {m}", graphs, rows)] = tokens_per_s(eng, prompts, n, steps,
                                                                      repeats)
            finally:
                eng.close()
    big, small = sorted(batches, reverse=True)
    on = not cpu
    table_rows = []
    for (name, graphs, rows), v in tps.items():
        if rows == big:
            table_rows.append([name, "on" if graphs else "off", round(v, 1),
                               round(tps[(name, graphs, small)], 1)])
    lines += ["", f"Decode throughput ({dtype}, eos ignored, {steps} steps, text prompts, whole "
              f"generates with prefill, median of {repeats}):", ""]
    lines += table(["engine", "CUDA graphs", f"tok/s {big} rows", f"tok/s {small} rows"],
                     table_rows)
    lines += ["", "Ratios (goal: ≥ 0.9 of stock hard and ≥ 0.95 of plugin hard, graphs on)"
              + (" — graphs off on the CPU, so these say nothing about the goal" if cpu else "")
              + ":", ""]
    ratio_rows = []
    for m in ("fixed", "adaptsoft"):
        for rows in (big, small):
            x = tps[(f"plugin {m}", on, rows)]
            ratio_rows.append([m, rows, round(x / tps[("stock hard", on, rows)], 3),
                               round(x / tps[("plugin hard", on, rows)], 3)]
                              + ([] if cpu else [round(x / tps[(f"plugin {m}", False, rows)], 2)]))
    head = ["mode", "rows", "÷ stock hard", "÷ plugin hard"]
    lines += table(head + ([] if cpu else ["graphs on ÷ off"]), ratio_rows)
    if not cpu:
        for m, rows, r_stock, r_hard, *_ in ratio_rows:
            if rows == big and (r_stock < 0.9 or r_hard < 0.95):
                ctx.notes.append(f"f: plugin {m} with CUDA graphs at {rows} rows is {r_stock}× "
                                 f"stock hard and {r_hard}× plugin hard (goal 0.9 / 0.95)")
    return tps


def overlap(ctx, model, ctrl, lines: list[str]) -> list[str]:
    """Overlap scheduling on vs off per mode: bf16 throughput at the big batch, fp32 parity
    (token-id prompts batched, and alone) next to the control (overlap off twice); returns the
    comparisons that fail (docstring of the module)."""
    from transformers import AutoTokenizer

    from soft_spatial.softthink import SamplingConfig, SoftThinkingConfig
    cpu, dry = ctx.device == "cpu", ctx.dry_run
    tok = AutoTokenizer.from_pretrained(model)
    n, g, steps = (2, 2, 8) if dry else (4, 2, 32)
    prompts = text_prompts(tok, n, 4 if dry else 16)
    t_prompts, t_g, t_steps = (prompts, 2, 8) if dry else (text_prompts(tok, 8, 16), 8,
                                                           64 if ctx.quick else 128)
    sampling = SamplingConfig(temperature=0.8, max_new_tokens=steps)
    rows, tps, bad = [], {}, []
    # the dry run checks the logic once, on the mode that takes every path of the sampler
    # (tests/sglang_real/test_real_engine_overlap.py checks every mode on the CPU)
    with env_vars({} if cpu else PARITY_ENV):
        for m in ("adaptsoft",) if dry else MODES:
            conf, outs = SoftThinkingConfig(mode=m), {}
            for side, off in (("off", True), ("on", False)):
                args = stage_server_args(ctx, "float32", not cpu, disable_overlap_schedule=off,
                                   disable_radix_cache=True)
                eng = plugin_engine(model, m, ctrl, args)
                try:
                    eng.generate(prompts[:1], soft_thinking=conf,
                                 sampling=SamplingConfig(max_new_tokens=2), seed=999)
                    for run in ((side, "off2") if off else (side,)):
                        eng.backend.flush_cache()
                        outs[(run, "batch")] = eng.generate(prompts, soft_thinking=conf,
                                                            sampling=sampling, n=g, seed=7)
                        eng.backend.flush_cache()
                        outs[(run, "alone")] = [eng.generate(
                            [p], soft_thinking=conf, sampling=sampling, seed=100 * i)[0]
                            for i, p in enumerate(prompts)]
                    if dry:  # the dry run times this engine: the timing's logic, not a number
                        tps[(m, side)] = tokens_per_s(eng, t_prompts, t_g, t_steps, 1)
                finally:
                    eng.close()
                if dry:
                    continue
                args = stage_server_args(ctx, "bfloat16", not cpu, disable_overlap_schedule=off)
                eng = plugin_engine(model, m, ctrl, args)
                try:
                    tps[(m, side)] = tokens_per_s(eng, t_prompts, t_g, t_steps, 3)
                finally:
                    eng.close()
            cells = [m, round(tps[(m, "off")], 1), round(tps[(m, "on")], 1),
                     round(tps[(m, "on")] / tps[(m, "off")], 3)]
            for what in ("batch", "alone"):
                test = first_difference(outs[("on", what)], outs[("off", what)])
                control = first_difference(outs[("off2", what)], outs[("off", what)])
                cells += [summary(*test), summary(*control)]
                path = ("token_ids", "topk_ids", "soft")
                left_path = any(test[0][f] and not control[0][f] for f in path)
                if left_path or (not cpu and test[1] is not None
                                 and max(test[0].values()) > max(control[0].values())):
                    bad.append(f"{m} ({what})")
            rows.append(cells)
    lines += ["", f"Overlap scheduling on vs off (CUDA graphs {'off: CPU' if cpu else 'on'}): "
              f"tok/s {'fp32' if dry else 'bf16'}, {len(t_prompts) * t_g} rows × {t_steps} "
              f"steps, median of {1 if dry else 3}; parity fp32, radix cache off, {n} token-id "
              f"prompts × {g} samples batched and every prompt alone, {steps} steps, next to "
              f"overlap off twice:", ""]
    lines += table(["mode", "tok/s off", "tok/s on", "on ÷ off", "batched on vs off",
                    "batched, off twice", "alone on vs off", "alone, off twice"], rows)
    return bad


def sampler_sync(ctx, lines: list[str]) -> list[str]:
    """Part ``sync``: the modes whose sampler waits for the device (none expected)."""
    if ctx.dry_run:
        dev, vocab, hidden = "meta", 97, 16
    else:  # the Qwen vocabulary and the 2B shape's width
        dev, vocab, hidden = "cuda", 151936, QWEN3_VL_2B_TEXT["hidden_size"]
    rows, bad = [], []
    for mode in MODES:
        try:
            n = drive_sampler(dev, mode, vocab=vocab, hidden=hidden)
            rows.append([mode, n, "none"])
        except Exception as e:  # the synchronising op, named by torch
            bad.append(mode)
            rows.append([mode, "-", f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"])
    check = ("meta tensors (any host read raises)" if dev == "meta" else
             'torch.cuda.set_sync_debug_mode("error")')
    lines += ["", f"Soft sampler waits for the device? (SoftRuntime.sample, vocabulary {vocab}, "
              f"hidden {hidden}, on {dev}, checked by {check}):", ""]
    lines += table(["mode", "rows sampled", "synchronising op"], rows)
    return bad


def stage_f(ctx, parts=("sync", "parity", "throughput", "overlap")) -> list[str]:
    lines: list[str] = []
    waits = sampler_sync(ctx, lines) if "sync" in parts else []
    if waits:
        ctx.notes.append(f"f: the soft sampler waits for the device in {waits}")
    if not {"parity", "throughput", "overlap"} & set(parts):  # nothing else needs SGLang
        if waits:
            raise StageFailed(lines)
        return lines
    try:
        import sglang
    except ImportError as e:
        raise Skip(f"sglang is not installed ({e}); see stage d") from e
    if ctx.device == "cpu" and os.environ.get("SGLANG_USE_CPU_ENGINE") != "1":
        raise Skip("on the CPU SGLang's engine needs SGLANG_USE_CPU_ENGINE=1 and "
                     "tests/sglang_stubs on PYTHONPATH (as scripts/test.sh runs tests/sglang_real)")
    from soft_spatial.models import build_tiny_model
    shape = {} if ctx.dry_run else dict(QWEN3_VL_2B_TEXT, vision_config=QWEN3_VL_2B_VISION)
    t0 = time.perf_counter()
    model = build_tiny_model(ctx.workdir / "f-model", family="qwen3_vl", vocab="qwen", **shape)
    ctrl = ctx.workdir / "f-adaptsoft.pt"
    from transformers import AutoConfig
    hidden = AutoConfig.from_pretrained(model).text_config.hidden_size
    random_controller(hidden).save(ctrl)
    lines += [f"Model: {'tiny' if ctx.dry_run else 'Qwen3-VL-2B'}-shaped Qwen3-VL, random "
             f"weights, written in {time.perf_counter() - t0:.0f} s; sglang {sglang.__version__}; "
             f"server args {stage_server_args(ctx, 'bfloat16', True)}."]
    if ctx.device == "cpu":
        lines.append(f"CPU: {CPU_NO_GRAPHS}.")
    bad = parity(ctx, model, ctrl, lines) if "parity" in parts else []
    if bad:
        ctx.notes.append(f"f: graphs-on vs graphs-off records differ beyond SGLang's "
                         f"run-to-run control in {bad} (fp32)")
    if "throughput" in parts:
        stage_throughput(ctx, model, ctrl, lines)
    if "overlap" in parts:
        over = overlap(ctx, model, ctrl, lines)
        if over:
            ctx.notes.append(f"f: overlap on vs off differ beyond SGLang's run-to-run control "
                             f"in {over} (fp32)")
        bad += over
    if bad or waits:
        raise StageFailed(lines)
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="scripts/gpu/stage_f.py", description=__doc__.split("\n")[0])
    ap.add_argument("--parts", default="sync,parity,throughput,overlap")
    ap.add_argument("--out", default="gpu-report-f.md")
    ap.add_argument("--dry-run", action="store_true")
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args(argv)
    import torch
    if not a.dry_run and not torch.cuda.is_available():
        ap.error("no CUDA device: run on a GPU machine, or pass --dry-run")
    device = "cpu" if a.dry_run else "cuda"
    name = "CPU (dry run)" if a.dry_run else torch.cuda.get_device_name(0)
    report = Report(Path(a.out), [f"# GPU kit stage f ({name}; {versions()})", ""])
    with tempfile.TemporaryDirectory(prefix="gpukit-f-") as tmp:
        ctx = Ctx(a.dry_run, a.quick, device, report, Path(tmp))
        t0, status = time.perf_counter(), "ok"
        try:
            lines = stage_f(ctx, tuple(a.parts.split(",")))
        except Skip as e:
            lines, status = [str(e)], "skipped"
        except StageFailed as e:
            lines, status = e.lines, "failed"
        report.add("f. SGLang soft decoding under CUDA graphs", status,
                   lines + [f"- {x}" for x in ctx.notes], time.perf_counter() - t0)
    print("\n".join([status] + lines), flush=True)
    return 0 if status != "failed" else 1


if __name__ == "__main__":
    sys.exit(main())
