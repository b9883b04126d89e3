"""Stage a: the embedded engine (``LocalEngine``) on CUDA with a random Qwen3-VL-8B-Thinking-shaped
model (built from its config, bf16, no download): soft decoding with noise 0 and τ→0 equals greedy
decoding; hard vs fixed vs adaptsoft decode throughput at 8 prompts × G=8 with images."""
from __future__ import annotations

import time

from soft_spatial.bench.workloads import random_controller
from soft_spatial.bench.gpu.measure import MODES, Ctx, PeakMemory, free_memory, random_model, sync
from soft_spatial.bench.gpu.prompts import image_prompts
from soft_spatial.bench.gpu.report import table
from soft_spatial.models.shapes import QWEN3_VL_8B

__all__ = ["stage_a", "greedy_limit"]


def stage_a(ctx: Ctx) -> list[str]:
    import torch

    from soft_spatial.engines import LocalEngine
    from soft_spatial.models.tiny import build_processor, build_tokenizer, tiny_config
    from soft_spatial.models.shapes import check_config
    from soft_spatial.softthink import SamplingConfig, SoftThinkingConfig

    dev = ctx.device
    prompts_n, g, steps, side = (2, 2, 8, 64) if ctx.dry_run else (8, 8, 64 if ctx.quick else 128, 320)
    tok = build_tokenizer("qwen")
    shape = {} if ctx.dry_run else dict(QWEN3_VL_8B)
    config = check_config(tiny_config("qwen3_vl", tok, **shape), "stage a's model")
    t0 = time.perf_counter()
    model = random_model(config, dev, ctx.dtype)
    sync(dev)
    build_s = time.perf_counter() - t0
    n_params = sum(p.numel() for p in model.parameters())
    processor = build_processor("qwen3_vl", tok)
    processor.image_processor.size = {"shortest_edge": 32 * 32, "longest_edge": 128 * 32 * 32}
    eng = LocalEngine(model, tok, processor, max_batch_rows=prompts_n * g, name="qwen3-vl-8b-shape")
    eng.eos_ids = []  # fixed-length decoding: every mode runs the same number of steps
    eng.set_controller(random_controller(eng.hidden_size).to_state())
    prompts = image_prompts(prompts_n, side)
    lines = [f"Model: Qwen3-VL-8B-Thinking shape, random weights, {n_params / 1e9:.2f} B parameters, "
             f"{str(ctx.dtype).replace('torch.', '')}, built on {dev} in {build_s:.1f} s."]

    # 1. soft decoding in the limit (noise 0, τ→0) is greedy decoding
    lines += ["", *greedy_limit(eng, prompts, steps, ctx)]
    # 2. throughput, modes interleaved across repeats
    sampling = SamplingConfig(max_new_tokens=steps)
    confs = {m: SoftThinkingConfig(mode=m) for m in MODES}
    eng.generate(prompts[:1], soft_thinking=confs["adaptsoft"], sampling=SamplingConfig(max_new_tokens=4))
    repeats = 1 if ctx.dry_run else 2
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
            toks = sum(len(o.token_ids) for o in outs)
            if m not in best or toks / dt > best[m]["tps"]:
                best[m] = {"tps": toks / dt, "totals": dict(totals), "dt": dt, "mem": mem.mib}
    eng.enable_timing(False)
    rows = []
    for m, r in best.items():
        per = {k: 1e3 * r["totals"].get(k, 0.0) / steps for k in ("sample", "mixture", "forward")}
        rows.append([m, round(r["tps"], 1), round(r["tps"] / best["hard"]["tps"], 3),
                     round(per["sample"], 2), round(per["mixture"], 2), round(per["forward"], 2),
                     round(r["totals"].get("prefill", 0.0), 2), round(r["mem"], 0)])
    lines += ["", f"Decode throughput: {prompts_n} prompts × G={g} = {prompts_n * g} rows, "
              f"{side}×{side} images, {steps} steps (eos ignored), best of {repeats}:", ""]
    lines += table(["mode", "tok/s", "× hard", "sample ms/step", "mixture ms/step",
                    "forward ms/step", "prefill s", "peak extra MiB"], rows)
    del eng, model
    free_memory()
    if not ctx.dry_run:  # the limit again in fp32, where the top-2 logits practically never tie
        model = random_model(config, dev, torch.float32)
        eng = LocalEngine(model, tok, processor, max_batch_rows=prompts_n, name="fp32")
        eng.eos_ids = []
        lines += ["", "The same check with the model in fp32:", "",
                  *greedy_limit(eng, prompts, steps, ctx)]
        del eng, model
        free_memory()
    return lines


def greedy_limit(eng, prompts, steps: int, ctx: Ctx) -> list[str]:
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
    repeat = sum(a.token_ids == b.token_ids for a, b in zip(hard, again))
    soft = eng.generate(prompts, soft_thinking=SoftThinkingConfig(mode="fixed", noise_scale=0.0,
                                                         fixed_tau=1e-30), sampling=greedy,
                        debug=True)
    same = unexplained = ties = 0
    detail = []
    for h, s in zip(hard, soft):
        part = next((i for i, (a, b) in enumerate(zip(h.token_ids, s.token_ids)) if a != b), None)
        lp = s.debug["logp"]
        tie_steps = (lp[:, 0] == lp[:, 1]).nonzero().flatten().tolist()
        first_tie = tie_steps[0] if tie_steps else None
        ties += first_tie is not None
        if part is None:
            same += 1
        elif first_tie is None or first_tie > part:
            unexplained += 1
        detail.append(f"{part if part is not None else '–'}/{first_tie if first_tie is not None else '–'}")
    dtype = str(eng.dtype).replace("torch.", "")
    out = [f"Greedy limit ({dtype}): {same}/{len(hard)} prompts decode the same {steps} tokens "
           f"with soft (noise 0, τ=1e-30) as with hard greedy decoding; {ties} prompts met an exact "
           f"tie of their top-2 logits; {unexplained} parted before any tie "
           f"(first differing step / first tie per prompt: {', '.join(detail)}). Hard greedy "
           f"decoding run twice: {repeat}/{len(hard)} prompts identical (the run-to-run floor)."]
    if unexplained:
        ctx.notes.append(f"a: {unexplained} prompts left greedy decoding before any tie ({dtype})")
    return out
