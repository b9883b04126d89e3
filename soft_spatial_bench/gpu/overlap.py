"""X/overlap-parity — the plugin under SGLang's overlap scheduling decodes what it decodes without:
fp32 records with overlap on against overlap off, next to SGLang's own run-to-run control
(overlap off twice). With the F jobs' overlap-on ÷ off throughput it decides the default
(docs/sglang.md, "Overlap scheduling").

Token-id prompts batched (one message: the same prefill grouping every run) and every prompt
alone, the radix cache off (with it on, a sample's first decode reads another copy of its shared
prompt's KV under overlap: docs/sglang.md), graphs as on the device (on; off on a CPU), Triton's
dots in IEEE fp32, a fixed number of KV splits, native ops. The job fails where overlap on leaves
the control's decoding path or, on a GPU, differs by more than the control does.
"""
from __future__ import annotations

from dataclasses import dataclass

from soft_spatial_bench.gpu.context import KitContext, env_vars, shared_model
from soft_spatial_bench.gpu.graphs import plugin_engine
from soft_spatial_bench.gpu.prompts import text_prompts
from soft_spatial_bench.gpu.report import JobFailed, table
from soft_spatial_bench.gpu.sglang_args import cpu_args, cuda_args, engine_env
from soft_spatial_bench.gpu.soft_parity import STATIC_KV_SPLITS

__all__ = ["OverlapResult", "measure", "render", "first_difference", "FIELDS"]

FIELDS = ("token_ids", "topk_ids", "soft", "weights", "tau", "loglik")
PATH = ("token_ids", "topk_ids", "soft")


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
                    dev[f] = max(dev[f], float((x.double() - y.double()).abs().max()))
                    first = first or (f"row {row} step {step} field {f}: "
                                      f"{x.squeeze(0).tolist()} vs {y.squeeze(0).tolist()}")
    if len(got) != len(want):
        first = first or f"{len(got)} rows vs {len(want)}"
    return dev, first


def summary(dev: dict, first: str | None) -> str:
    if first is None:
        return "exact"
    return ", ".join(f"Δ{f} {dev[f]:.2g}" for f in FIELDS if dev[f]) + f"; first: {first}"


def _runs(ctx: KitContext, mode: str, prompts, g: int, steps: int) -> dict:
    """{(side, "batch"|"alone"): completions} for sides off, off2 (a second run of the same
    engine) and on."""
    from soft_spatial.softthink import SamplingConfig, SoftThinkingConfig
    model, ctrl, _ = shared_model(ctx)
    conf, outs = SoftThinkingConfig(mode=mode), {}
    sampling = SamplingConfig(temperature=0.8, max_new_tokens=steps)
    for side, overlap in (("off", False), ("on", True)):
        args = (cpu_args(disable_overlap_schedule=not overlap, disable_radix_cache=True)
                if ctx.dry_run else
                cuda_args("float32", graphs=True, plugin=True, overlap=overlap, parity=True,
                          attention="triton") | {"disable_radix_cache": True})
        eng = plugin_engine(model, mode, ctrl, args)
        try:
            eng.generate(prompts[:1], soft_thinking=conf, seed=999,
                         sampling=SamplingConfig(max_new_tokens=2))
            for run in (side, "off2") if side == "off" else (side,):
                eng.backend.flush_cache()
                outs[(run, "batch")] = eng.generate(prompts, soft_thinking=conf,
                                                    sampling=sampling, n=g, seed=7)
                eng.backend.flush_cache()
                outs[(run, "alone")] = [eng.generate([p], soft_thinking=conf, sampling=sampling,
                                                     seed=100 * i)[0]
                                        for i, p in enumerate(prompts)]
        finally:
            eng.close()
    return outs


@dataclass
class OverlapResult:
    """X/overlap-parity's result: per mode, batched and alone, [on vs off, off twice] as
    :func:`summary` text; ``bad``: the comparisons that failed."""

    rows: dict
    bad: list
    shape: list
    graphs: bool


def measure(ctx: KitContext, job) -> OverlapResult:
    from transformers import AutoTokenizer
    model, _, _ = shared_model(ctx)
    n, g, steps = (2, 2, 8) if ctx.dry_run else (4, 2, 32)
    prompts = text_prompts(AutoTokenizer.from_pretrained(model), n, 4 if ctx.dry_run else 16)
    env = {**engine_env(parity=True, native_ops=True), **STATIC_KV_SPLITS}
    rows, bad = {}, []
    with env_vars({} if ctx.dry_run else env):
        for mode in job.args["modes"]:
            outs = _runs(ctx, mode, prompts, g, steps)
            rows[mode] = {}
            for what in ("batch", "alone"):
                test = first_difference(outs[("on", what)], outs[("off", what)])
                control = first_difference(outs[("off2", what)], outs[("off", what)])
                rows[mode][what] = [summary(*test), summary(*control)]
                left_path = any(test[0][f] and not control[0][f] for f in PATH)
                if left_path or (not ctx.dry_run and test[1] is not None
                                 and max(test[0].values()) > max(control[0].values())):
                    bad.append(f"{mode} ({what})")
    r = OverlapResult(rows, bad, [n, g, steps], not ctx.dry_run)
    if bad:
        raise JobFailed(f"overlap on differs beyond SGLang's run-to-run control in {bad}", r)
    return r


def render(v: OverlapResult) -> list[str]:
    n, g, steps = v.shape
    return [f"Overlap scheduling on vs off, fp32, radix cache off, CUDA graphs "
            f"{'on' if v.graphs else 'off (CPU)'}: {n} token-id prompts × {g} samples batched "
            f"and every prompt alone, {steps} steps, next to overlap off twice (SGLang's "
            f"run-to-run control); fails where overlap leaves the control's path"
            + (" or differs beyond it" if v.graphs else "") + ":", "",
            *table(["mode", "batched on vs off", "batched, off twice", "alone on vs off",
                    "alone, off twice"],
                   [[m, *r["batch"], *r["alone"]] for m, r in v.rows.items()])]
