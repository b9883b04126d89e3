"""D — soft parity on CUDA at the 2B shape: SGLang in fp32 against the embedded engine's fp32 and
fp64 runs of the same weights, prompts and seeds (the headline plan's D jobs; the bound is
docs/sglang.md's, applied per row by :func:`~.parity.row_verdicts`).

Two kinds of job: ``references`` runs the embedded engine (``LocalEngine``) in fp32 and fp64 for
the asked modes and stores the completions as JSON in the scratch directory; ``engine`` starts one
SGLang engine in fp32 (attention ``torch_native``, graphs off, native ops, TF32 off everywhere:
:func:`~.sglang_args.engine_env`), generates the same rows and gives each row its verdict, the
first divergence and the per-step |Δ| of three pairs.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

from soft_spatial.lab.gpu import parity
from soft_spatial.lab.gpu.context import (KitContext, env_vars, free_memory, shared_model,
                                          wait_device_free)
from soft_spatial.lab.gpu.prompts import image_prompts
from soft_spatial.lab.gpu.report import table
from soft_spatial.lab.gpu.sglang_args import cpu_args, cuda_args, engine_env, unset_backends

__all__ = ["references", "engine", "server_args", "shape", "tf32_off"]

SEED = 7


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


def _dump(rows) -> list[dict]:
    return [{"prompt_index": c.prompt_index, "sample_index": c.sample_index,
             "prompt_ids": c.prompt_ids, "token_ids": c.token_ids, "text": c.text,
             "trace": c.trace.to_lists(), "finish_reason": c.finish_reason,
             "think_end": c.think_end, "logprobs": [float(x) for x in c.logprobs]} for c in rows]


def _load(data: list[dict]):
    from soft_spatial.engines.base import Completion
    from soft_spatial.softthink import SoftTrace
    return [Completion(**dict(d, trace=SoftTrace.from_lists(d["trace"]))) for d in data]


def references(ctx: KitContext, modes: tuple[str, ...]) -> tuple[dict, list[str]]:
    """The embedded engine's fp32 and fp64 runs for ``modes``, stored for :func:`engine`."""
    from soft_spatial.softthink import SoftThinkingConfig
    model, ctrl, facts = shared_model(ctx)
    n, g, steps, side = shape(ctx.dry_run)
    tf32_off()
    t0 = time.perf_counter()
    runs = parity.local_runs(model, ctx.device, {m: SoftThinkingConfig(mode=m) for m in modes},
                             image_prompts(n, side), _sampling(ctx.dry_run), g, seed=SEED,
                             controller=ctrl)
    free_memory()
    for m in modes:
        path = _refs_path(ctx, m)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps({k: _dump(v) for k, v in runs[m].items()}))
        tmp.replace(path)
    values = {"modes": list(modes), "seconds": round(time.perf_counter() - t0, 1),
              "fp32_on_fp64_path": {m: sum(parity.same_path(a, b) for a, b in
                                           zip(runs[m]["float32"], runs[m]["float64"]))
                                    for m in modes}, "rows": n * g, "model": facts}
    lines = [f"Embedded engine (transformers, TF32 off) in fp32 and fp64 for {', '.join(modes)}: "
             f"{n} image prompts ({side}×{side}) × {g} samples, {steps} steps, seed {SEED}, "
             f"{values['seconds']:.0f} s; local fp32 on fp64's path: "
             + ", ".join(f"{m} {c}/{n * g}" for m, c in values["fp32_on_fp64_path"].items())]
    return values, lines


def _drift_lines(title: str, a, b, names: tuple[str, str]) -> list[str]:
    first = parity.describe(parity.first_divergence(a, b, float("inf")), names)
    same = sum(parity.same_path(x, y) for x, y in zip(a, b))
    out = [f"- {title}: {same}/{len(b)} rows on the same path; first path divergence: {first}"]
    out += [f"  - max \\|Δ {f}\\| per step: {parity.curve(v)}"
            for f, v in parity.per_step_deltas(a, b).items()]
    return out


def server_args(dry: bool) -> dict:
    """An fp32 parity engine's SGLang server arguments (CUDA: every backend named)."""
    if dry:
        return cpu_args()
    args = cuda_args("float32", graphs=False, plugin=True, parity=True)
    missing = unset_backends(args, plugin=True)
    if missing:
        raise ValueError(f"server arguments leave backends to SGLang's defaults: {missing}")
    return args


def engine(ctx: KitContext, mode: str) -> tuple[dict, list[str]]:
    """SGLang in fp32 for ``mode`` against the stored references: a verdict per row."""
    from soft_spatial.engines.sglang.engine import SGLangEngine
    from soft_spatial.softthink import SoftThinkingConfig

    model, ctrl, _ = shared_model(ctx)
    path = _refs_path(ctx, mode)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no embedded-engine references for {mode} (its "
                                f"references job did not finish)")
    refs = {k: _load(v) for k, v in json.loads(path.read_text()).items()}
    want, ref = refs["float32"], refs["float64"]
    n, g, steps, side = shape(ctx.dry_run)
    args = server_args(ctx.dry_run)
    conf = SoftThinkingConfig(mode=mode)
    t0 = time.perf_counter()
    with env_vars(engine_env(parity=True, native_ops=True)):
        eng = SGLangEngine(model, conf, controller=ctrl if mode == "adaptsoft" else None,
                           server_args=args)
    try:
        eng.eos_ids = []  # fixed-length decoding: every engine runs the same steps
        got = eng.generate(image_prompts(n, side), soft_thinking=conf, sampling=_sampling(ctx.dry_run),
                           n=g, seed=SEED)
    finally:
        eng.close()
        free_memory()
        if not ctx.dry_run:
            wait_device_free()
    verdicts = parity.row_verdicts(got, want, ref)
    count = {k: sum(v["status"] == k for v in verdicts)
             for k in ("ok", "ill-conditioned", "path", "bound")}
    same = [(a, b) for a, b in zip(got, want) if parity.same_path(a, b)]
    dev = {k: max((parity.max_abs(a, b, k) for a, b in same), default=float("nan"))
           for k in parity.FLOATS}
    soft = sum(int(c.trace.soft.sum()) for c in got) / max(sum(len(c.token_ids) for c in got), 1)
    values = {"mode": mode, "rows": len(ref), "same_path_as_fp32": len(same),
              "verdicts": count, "within_bound": count["ok"] + count["ill-conditioned"],
              "max_dev_vs_fp32": {k: (None if v != v else v) for k, v in dev.items()},
              "soft_step_fraction": round(soft, 4), "seconds": round(time.perf_counter() - t0, 1),
              "passed": not (count["path"] or count["bound"])}
    lines = [f"**{mode}** (SGLang fp32: attention {args['attention_backend']}, vision "
             f"{args.get('mm_attention_backend', 'default')}, CUDA graphs off, native ops, TF32 off; "
             f"{n} image prompts × {g}, {steps} steps, seed {SEED}; soft steps "
             f"{values['soft_step_fraction']:.0%}): {count['ok']} ok, {count['ill-conditioned']} "
             f"ill-conditioned (local fp32 leaves fp64's path), {count['path']} off the path, "
             f"{count['bound']} beyond the bound (max\\|SGLang − fp64\\| ≤ {parity.ATOL:g} + "
             f"{parity.AMPLIFICATION:g}·max\\|fp32 − fp64\\|)", ""]
    lines += table(["same path as local fp32", "max \\|Δ loglik\\|", "max \\|Δ scores\\|",
                    "max \\|Δ τ\\|", "within the bound"],
                   [[f"{len(same)}/{len(want)}", dev["loglik"], dev["scores"],
                     dev["tau"] if mode == "adaptsoft" else "–",
                     f"{values['within_bound']}/{len(ref)}"]])
    lines += [""] + [f"- row {r}: {v['field']} max\\|Δ\\| {v['dev']:.3g} > bound {v['bound']:.3g} "
                     f"over {v['steps']} steps" for r, v in enumerate(verdicts)
                     if v["status"] == "bound"]
    lines += [f"- first difference beyond {parity.ATOL:g}, SGLang against local fp64: "
              + parity.describe(parity.first_divergence(got, ref, parity.ATOL), ("SGLang", "fp64"))]
    lines += _drift_lines("SGLang against local fp32", got, want, ("SGLang", "fp32"))
    lines += _drift_lines("SGLang against local fp64", got, ref, ("SGLang", "fp64"))
    lines += _drift_lines("local fp32 against local fp64", want, ref, ("fp32", "fp64"))
    return values, lines
