"""A/embedded: the embedded engine (``LocalEngine``) on CUDA with a random Qwen3-VL-8B-Thinking-shaped
model (built from its config, bf16, no download): soft decoding with noise 0 and τ→0 equals greedy
decoding (again in fp32, where the top-2 logits practically never tie); hard vs fixed vs adaptsoft
decode throughput at 8 prompts × G=8 with images. A dry run: the tiny Qwen3-VL on the CPU, 2
prompts × 2, 8 steps."""
from __future__ import annotations

import time
from dataclasses import dataclass, field

from soft_spatial.bench.gpu.context import KitContext, free_memory
from soft_spatial.bench.gpu.measure import MODES, PeakMemory, random_model, sync
from soft_spatial.bench.gpu.prompts import image_prompts
from soft_spatial.bench.gpu.report import table
from soft_spatial.bench.workloads import random_controller
from soft_spatial.models.shapes import QWEN3_VL_8B

__all__ = ["GreedyLimit", "EmbeddedResult", "measure", "render", "greedy_limit"]

THROUGHPUT = ["mode", "tok/s", "× hard", "sample ms/step", "mixture ms/step", "forward ms/step",
              "prefill s", "peak extra MiB"]


@dataclass
class GreedyLimit:
    """:func:`greedy_limit`'s counts of prompts; ``detail``: "first differing step/first tie" of
    each; ``repeat``: those whose hard greedy decoding ran twice identically."""

    dtype: str
    prompts: int
    steps: int
    same: int
    ties: int
    unexplained: int
    detail: list
    repeat: int


@dataclass
class EmbeddedResult:
    """A/embedded's result: the model, the greedy limit in its dtype (on a GPU then in fp32), a
    row of :data:`THROUGHPUT` per mode."""

    params_b: float
    dtype: str
    device: str
    build_s: float
    prompts: int
    g: int
    side: int
    steps: int
    repeats: int
    greedy: list = field(default_factory=list)
    modes: list = field(default_factory=list)


def _engine(model, tok, processor, rows: int, name: str):
    from soft_spatial.engines import LocalEngine
    eng = LocalEngine(model, tok, processor, max_batch_rows=rows, name=name)
    eng.eos_ids = []  # fixed-length decoding: every mode runs the same number of steps
    return eng


def measure(ctx: KitContext, job) -> EmbeddedResult:
    import torch

    from soft_spatial.models.shapes import check_config
    from soft_spatial.models.tiny import build_processor, build_tokenizer, tiny_config

    dev = ctx.device
    prompts_n, g, steps, side = (2, 2, 8, 64) if ctx.dry_run else (8, 8, 128, 320)
    tok = build_tokenizer("qwen")
    config = check_config(tiny_config("qwen3_vl", tok, **({} if ctx.dry_run else QWEN3_VL_8B)),
                          "A/embedded's model")
    processor = build_processor("qwen3_vl", tok)
    processor.image_processor.size = {"shortest_edge": 32 * 32, "longest_edge": 128 * 32 * 32}
    prompts = image_prompts(prompts_n, side)
    t0 = time.perf_counter()
    model = random_model(config, dev, ctx.dtype)
    sync(dev)
    r = EmbeddedResult(round(sum(p.numel() for p in model.parameters()) / 1e9, 3),
                       str(ctx.dtype).replace("torch.", ""), dev,
                       round(time.perf_counter() - t0, 1), prompts_n, g, side, steps,
                       1 if ctx.dry_run else 2)
    eng = _engine(model, tok, processor, prompts_n * g, "qwen3-vl-8b-shape")
    eng.set_controller(random_controller(eng.hidden_size).to_state())
    r.greedy.append(greedy_limit(eng, prompts, steps))
    r.modes = _throughput(eng, prompts, g, steps, r.repeats, dev)
    del eng, model
    free_memory()
    if not ctx.dry_run:  # the limit again in fp32, where the top-2 logits practically never tie
        model = random_model(config, dev, torch.float32)
        r.greedy.append(greedy_limit(_engine(model, tok, processor, prompts_n, "fp32"), prompts,
                                     steps))
        del model
        free_memory()
    return r


def _throughput(eng, prompts, g: int, steps: int, repeats: int, dev: str) -> list[list]:
    """Per mode the best of ``repeats`` generates (modes interleaved across repeats): a row of
    :data:`THROUGHPUT`."""
    from soft_spatial.softthink import SamplingConfig, SoftThinkingConfig

    sampling = SamplingConfig(max_new_tokens=steps)
    confs = {m: SoftThinkingConfig(mode=m) for m in MODES}
    eng.generate(prompts[:1], soft_thinking=confs["adaptsoft"], sampling=SamplingConfig(max_new_tokens=4))
    best = {}
    for rep in range(repeats):
        for m, conf in confs.items():
            totals = eng.enable_timing()
            with PeakMemory(dev) as mem:
                sync(dev)
                t0 = time.perf_counter()
                outs = eng.generate(prompts, soft_thinking=conf, sampling=sampling, n=g, seed=rep)
                sync(dev)
                dt = time.perf_counter() - t0
            tps = sum(len(o.token_ids) for o in outs) / dt
            if m not in best or tps > best[m]["tps"]:
                best[m] = {"tps": tps, "totals": dict(totals), "mem": mem.mib}
    eng.enable_timing(False)
    rows = []
    for m, b in best.items():
        per = {k: 1e3 * b["totals"].get(k, 0.0) / steps for k in ("sample", "mixture", "forward")}
        rows.append([m, round(b["tps"], 1), round(b["tps"] / best["hard"]["tps"], 3),
                     round(per["sample"], 2), round(per["mixture"], 2), round(per["forward"], 2),
                     round(b["totals"].get("prefill", 0.0), 2), round(b["mem"], 0)])
    return rows


def greedy_limit(eng, prompts, steps: int) -> GreedyLimit:
    """Soft decoding with noise 0 and τ=1e-30 against hard greedy decoding, token for token.

    With τ this small softmax(z/τ) is exactly one-hot in fp32, so the mixture is the spine's
    embedding, unless the two largest candidate logits tie exactly (common with bf16 logits, whose
    spacing is 2⁻⁷ relative); then the mixture is an even blend and the runs part. A run that
    parts before its first tie is a failure.
    """
    from soft_spatial.softthink import SamplingConfig, SoftThinkingConfig

    greedy = SamplingConfig(max_new_tokens=steps, greedy=True)
    hard = eng.generate(prompts, soft_thinking=SoftThinkingConfig(mode="hard"), sampling=greedy)
    again = eng.generate(prompts, soft_thinking=SoftThinkingConfig(mode="hard"), sampling=greedy)
    soft = eng.generate(prompts, soft_thinking=SoftThinkingConfig(mode="fixed", noise_scale=0.0,
                                                                  fixed_tau=1e-30),
                        sampling=greedy, debug=True)
    same = unexplained = ties = 0
    detail = []
    for h, s in zip(hard, soft):
        part = next((i for i, (a, b) in enumerate(zip(h.token_ids, s.token_ids)) if a != b), None)
        lp = s.debug["logp"]
        tie_steps = (lp[:, 0] == lp[:, 1]).nonzero().flatten().tolist()
        first_tie = tie_steps[0] if tie_steps else None
        ties += first_tie is not None
        same += part is None
        unexplained += part is not None and (first_tie is None or first_tie > part)
        detail.append(f"{'–' if part is None else part}/{'–' if first_tie is None else first_tie}")
    return GreedyLimit(str(eng.dtype).replace("torch.", ""), len(hard), steps, same, ties,
                       unexplained, detail,
                       sum(a.token_ids == b.token_ids for a, b in zip(hard, again)))


def _greedy_line(x: GreedyLimit) -> str:
    return (f"Greedy limit ({x.dtype}): {x.same}/{x.prompts} prompts decode the same {x.steps} "
            f"tokens with soft (noise 0, τ=1e-30) as with hard greedy decoding; {x.ties} prompts "
            f"met an exact tie of their top-2 logits; {x.unexplained} parted before any tie "
            f"(first differing step / first tie per prompt: {', '.join(x.detail)}). Hard greedy "
            f"decoding run twice: {x.repeat}/{x.prompts} prompts identical (the run-to-run floor).")


def render(r: EmbeddedResult) -> list[str]:
    lines = [f"Model: Qwen3-VL-8B-Thinking shape (tiny in a dry run), random weights, "
             f"{r.params_b:.2f} B parameters, {r.dtype}, built on {r.device} in {r.build_s} s.",
             "", *map(_greedy_line, r.greedy[:1]), "",
             f"Decode throughput: {r.prompts} prompts × G={r.g} = {r.prompts * r.g} rows, "
             f"{r.side}×{r.side} images, {r.steps} steps (eos ignored), best of {r.repeats}:", "",
             *table(THROUGHPUT, r.modes)]
    for x in r.greedy[1:]:
        lines += ["", f"The same check with the model in {x.dtype}:", "", _greedy_line(x)]
    for x in r.greedy:
        if x.unexplained:
            lines += ["", f"**Attention**: {x.unexplained} prompts left greedy decoding before any "
                          f"tie ({x.dtype})"]
    return lines
