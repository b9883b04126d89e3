"""E's diagnosis: where SGLang's soft rollout and the trainer's replay of it part, step by step and
input tensor by input tensor (run by an E job whose fp32 verdict fails, and by E/fp32's dry run).

On E's own model and dtype, in the E job's process:

1. **Rollout**: SGLang with the plugin as E's rollout runs it (adaptsoft with a random controller,
   graphs on with Triton attention on a GPU, Triton's dots in IEEE fp32 and TF32 off in fp32)
   decodes image prompts; each step's records and likelihood are kept.
2. **Replay**: the trainer's computation of the same steps, teacher-forced in one forward of the
   same weights (transformers, as verl's actor builds the model; the records installed by
   :func:`~soft_spatial.softthink.replay.soft_inputs`, the function the actor's engine installs;
   the per-step likelihood by the same density): :func:`~soft_spatial.engines.replay.
   replay_completion`.
3. **The first divergent step**: per row and step |SGLang's likelihood − the replay's|, the first
   step beyond the bound (E's :data:`~.grpo.FP32_BOUND`), and the maximum per split (step 0, soft, hard): the E
   metric's split, reproduced here where each tensor can be seen.
4. **The soft inputs, tensor by tensor**, each computed the rollout's way and the trainer's way:

   * *mixture embedding*: what the replay fed at each response position (the embedding module's
     output with the records installed) against Σ_k w_k E[ids_k] recomputed in fp64 from the
     records (the plugin's formula: softmax(z/τ) over the recorded candidates);
   * *positions*: the trainer's (the model's ``get_rope_index`` over prompt + response, as verl's
     agent loop computes them) against the rollout's (the prompt's positions continued by
     ``rope_deltas``, as SGLang's M-RoPE and ``generate`` decode);
   * *vision features*: the vision tower's output on the pixel values the rollout's prompt
     carried against those verl's agent loop builds for the trainer (the response decoded,
     image placeholders collapsed, the processor run again: ``build_multimodal_processor_inputs``).

SGLang's own internal tensors are not read (that would need a probe inside its scheduler); its
records and likelihoods are, and D's parity ties SGLang's forward to transformers' in fp32. So:
likelihoods that agree here while E's metric does not put the mismatch in verl's data path
(padding, packing, FSDP); a step-0 difference with equal positions and vision features points at
SGLang's prompt processing; a soft-step difference with an equal mixture embedding points at the
forward itself (attention, dtype).
"""
from __future__ import annotations

import math
from pathlib import Path

from soft_spatial_bench.gpu.report import table

__all__ = ["diagnose", "render", "NEEDS_S", "compare_rows"]

NEEDS_S = 150.0  # seconds to leave for it on a GPU: one engine's start, generate, a replay


def _rollout(model: Path, dtype: str, dry: bool, ctrl: Path, prompts, g: int, steps: int):
    from soft_spatial_bench.gpu.context import env_vars
    from soft_spatial_bench.gpu.graphs import plugin_engine
    from soft_spatial_bench.gpu.sglang_args import cpu_args, cuda_args, engine_env
    from soft_spatial.softthink import SamplingConfig, SoftThinkingConfig
    fp32 = dtype == "float32"
    args = cpu_args() if dry else cuda_args(dtype, graphs=True, plugin=True, parity=fp32,
                                            attention="triton")
    with env_vars(engine_env(parity=fp32 and not dry, native_ops=True)):
        eng = plugin_engine(model, "adaptsoft", ctrl, args)
    try:
        return eng.generate(prompts, soft_thinking=SoftThinkingConfig(mode="adaptsoft"), n=g,
                            seed=7, sampling=SamplingConfig(temperature=1.0,
                                                            max_new_tokens=steps))
    finally:
        eng.close()


def _first_tensor(out):
    import torch
    if isinstance(out, torch.Tensor):
        return out
    for x in (out if isinstance(out, (tuple, list)) else vars(out).values()):
        if isinstance(x, torch.Tensor):
            return x
    return None


def _replay(local, prompt, completion) -> dict:
    """The replay's likelihoods and what its forward saw: the embedding output, the positions."""
    from soft_spatial.engines.replay import replay_completion
    seen = {}

    def keep_embeds(mod, args, out):
        seen["embeds"] = out.detach()

    handle = local.embed.register_forward_hook(keep_embeds)  # after soft_inputs' hook
    try:
        r = replay_completion(local, prompt, completion, temperature=1.0)
    finally:
        handle.remove()
    return {"loglik": r["loglik"].double().cpu(), "embeds": seen["embeds"][0]}


def _positions(local, prompt, completion) -> dict:
    """The trainer's positions over prompt + response against the rollout's decode positions."""
    import torch

    from soft_spatial.models.rope import prefill_position_ids
    prep = local._prepare(0, prompt, 10 ** 9)
    p, n = len(prep.ids), len(completion.token_ids)
    ids = torch.tensor([prep.ids + list(completion.token_ids[: n - 1])], device=local.device)
    _, _, mm = local._batch([prep])
    full_mm = dict(mm)
    if "mm_token_type_ids" in mm:
        full_mm["mm_token_type_ids"] = torch.cat(
            [mm["mm_token_type_ids"], mm["mm_token_type_ids"].new_zeros(1, n - 1)], 1)
    trainer, _ = prefill_position_ids(local.model, ids, torch.ones_like(ids), **full_mm)
    head, deltas = prefill_position_ids(local.model, ids[:, :p], torch.ones_like(ids[:, :p]), **mm)
    steps = torch.arange(p, p + n - 1, device=ids.device)
    rollout = steps + (deltas.reshape(-1)[0] if deltas is not None else 0)
    got = trainer[..., p:].reshape(-1, n - 1)
    bad = (got != rollout.reshape(1, -1)).any(0).nonzero().flatten().tolist()
    prompt_same = bool(torch.equal(trainer[..., :p], head))
    return {"mismatched_steps": len(bad), "first_mismatch": bad[0] if bad else None,
            "prompt_positions_equal": prompt_same}


def _vision(local, prompt) -> dict:
    """The vision tower on the rollout's pixel values and on those verl builds for the trainer."""
    import torch
    from verl.utils.tokenizer.tokenizer import build_multimodal_processor_inputs

    from soft_spatial.engines.prompts import chat_images
    prep = local._prepare(0, prompt, 10 ** 9)
    if "pixel_values" not in prep.mm:
        return {"skipped": "no image"}
    pad = local.image_token_id
    collapsed = [t for i, t in enumerate(prep.ids) if not (t == pad and i and prep.ids[i - 1] == pad)]
    text = local.tokenizer.decode(collapsed, skip_special_tokens=True)
    trainer = build_multimodal_processor_inputs(local.processor, text=[text],
                                                images=chat_images(prompt, 0))
    visual = getattr(local.base, "visual", None) or local.model.visual
    dev, dt = local.device, local.dtype

    def features(mm):
        with torch.no_grad():
            out = visual(mm["pixel_values"].to(dev, dt), grid_thw=mm["image_grid_thw"].to(dev))
        return _first_tensor(out).double().cpu()

    a, b = prep.mm, trainer
    same_grid = bool(torch.equal(a["image_grid_thw"].cpu(), b["image_grid_thw"].cpu()))
    out = {"grid_equal": same_grid,
           "pixel_max_abs": float((a["pixel_values"].double() - b["pixel_values"].double())
                                  .abs().max()) if same_grid and
           a["pixel_values"].shape == b["pixel_values"].shape else None}
    fa, fb = features(a), features(b)
    out["features_max_abs"] = float((fa - fb).abs().max()) if fa.shape == fb.shape else None
    out["features_shape"] = list(fa.shape)
    return out


def _mixture(local, completion, embeds, p: int) -> list[float]:
    """Per response position: max |the replay's input embedding − Σ_k w_k E[ids_k] in fp64|."""

    from soft_spatial.softthink.mixture import record_input_embeddings
    tr = completion.trace
    n = len(completion.token_ids)
    table64 = local.embed.weight.detach().double().cpu()
    want = record_input_embeddings(table64, tr.topk_ids[: n - 1].cpu(),
                                   tr.scores[: n - 1].double().cpu(),
                                   tr.tau[: n - 1].double().cpu(), tr.soft[: n - 1].cpu())
    got = embeds[p: p + n - 1].double().cpu()
    return (got - want).abs().amax(-1).tolist() if got.shape == want.shape else [math.nan]


def compare_rows(rollout_logliks, replay_logliks, soft_masks, bound: float) -> dict:
    """Per row and step |Δ likelihood|: the first step beyond ``bound`` (row order within a
    step), the maximum per split (step 0, soft, hard, all) and the worst step's |Δ| per step."""
    first, worst = None, {"step0": 0.0, "soft": 0.0, "hard": 0.0, "all": 0.0}
    per_step: list[float] = []
    for r, (a, b, soft) in enumerate(zip(rollout_logliks, replay_logliks, soft_masks)):
        for s, (x, y, m) in enumerate(zip(a, b, soft)):
            d = abs(float(x) - float(y))
            d = d if d == d else math.inf  # NaN: a divergence
            if s >= len(per_step):
                per_step.append(0.0)
            per_step[s] = max(per_step[s], d)
            for k in ("all", "step0" if s == 0 else None, "soft" if m else "hard"):
                if k:
                    worst[k] = max(worst[k], d)
            if d > bound and (first is None or (s, r) < (first["step"], first["row"])):
                first = {"row": r, "step": s, "soft": bool(m), "delta": d}
    return {"first_beyond": first, "max": worst, "per_step": per_step}


def diagnose(model: Path, dtype: str, dry: bool, out_dir: Path, bound: float) -> dict:
    """The comparison (module docstring) for E's ``model`` in ``dtype``, steps beyond ``bound``
    nats named; a dry run: the CPU, fp32."""
    import torch

    from soft_spatial.engines import LocalEngine
    from soft_spatial_bench.workloads import random_controller
    from soft_spatial_bench.gpu.prompts import image_prompts
    out_dir.mkdir(parents=True, exist_ok=True)
    torch_dtype = torch.float32 if dry or dtype == "float32" else torch.bfloat16
    n, g, steps, side = (1, 2, 8, 64) if dry else (2, 2, 32, 224)
    prompts = image_prompts(n, side)
    local = LocalEngine.from_pretrained(model, device="cpu" if dry else "cuda", dtype=torch_dtype)
    ctrl = out_dir / "controller.pt"
    random_controller(local.hidden_size).save(ctrl)
    got = _rollout(model, dtype, dry, ctrl, prompts, g, steps)
    replays = [_replay(local, prompts[c.prompt_index], c) for c in got]
    rows = compare_rows([c.logprobs for c in got], [r["loglik"].tolist() for r in replays],
                        [c.trace.soft.tolist() for c in got], bound)
    p0 = len(local._prepare(0, prompts[got[0].prompt_index], 10 ** 9).ids)
    mix = [max(_mixture(local, c, r["embeds"], len(local._prepare(0, prompts[c.prompt_index],
                                                                     10 ** 9).ids)))
           for c, r in zip(got, replays)]
    return {"rows": len(got), "steps": steps, "dtype": str(torch_dtype).removeprefix("torch."),
            "likelihood": rows, "mixture_max_abs": max(mix),
            "positions": _positions(local, prompts[got[0].prompt_index], got[0]),
            "vision": _vision(local, prompts[got[0].prompt_index]), "prompt_tokens": p0,
            "bound": bound}


def render(d: dict) -> list[str]:
    if "skipped" in d or "error" in d:
        return [f"**Diagnosis** (the soft inputs, tensor by tensor): not run: "
                f"{d.get('skipped') or d.get('error')}", ""]
    lk, pos, vis = d["likelihood"], d["positions"], d["vision"]
    first = lk["first_beyond"]
    return [f"**Diagnosis** — SGLang's rollout against the trainer's replay of it, {d['rows']} "
            f"rows × {d['steps']} steps, {d['dtype']} (soft_spatial_bench/gpu/replay_inputs.py):",
            "", f"- first step beyond {d['bound']} nats: "
            + (f"row {first['row']} step {first['step']} ({'soft' if first['soft'] else 'hard'}), "
               f"|Δ| {first['delta']:.3g}" if first else "none"),
            "", *table(["", "step 0", "soft steps", "hard steps", "all"],
                       [["max \\|Δ likelihood\\|", *(f"{lk['max'][k]:.3g}" for k in
                                                     ("step0", "soft", "hard", "all"))]]),
            "", "- max \\|Δ\\| per step: " + " ".join(f"{x:.1e}" for x in lk["per_step"]),
            f"- mixture embedding (the replay's input against Σ w·E in fp64): max \\|Δ\\| "
            f"{d['mixture_max_abs']:.3g}",
            f"- positions: the prompt's {'equal' if pos['prompt_positions_equal'] else 'DIFFER'};"
            f" response steps whose trainer position differs from the rollout's: "
            f"{pos['mismatched_steps']}"
            + (f" (first: step {pos['first_mismatch']})" if pos["first_mismatch"] is not None
               else ""),
            "- vision features (rollout's pixel values against verl's rebuilt ones): "
            + (vis["skipped"] if "skipped" in vis else
               f"grids {'equal' if vis['grid_equal'] else 'DIFFER'}, pixel max \\|Δ\\| "
               f"{vis['pixel_max_abs']}, feature max \\|Δ\\| {vis['features_max_abs']} "
               f"(shape {vis['features_shape']})"), ""]
