"""The rollout/replay gap in bf16, on the CPU: the embedded engine decodes (KV cache, one step at a
time) and the teacher-forced replay recomputes every step (one uncached forward), both in the same
dtype, with the same weights and records; per soft step the gap log P_rollout − log P_replay is
set against the derivation (docs/sglang.md, "bf16 and the replay check").

    python scripts/study_bf16_replay.py                       # the three models below, ~10 min
    python scripts/study_bf16_replay.py --models tiny --steps 32

Per model and arm (fp32; bf16; bf16 with the head in fp32 on both sides, ``density.fp32_logits``):

* Δ_k = replay − rollout candidate log-prob at every soft step (RMS, max), and the part of it one
  side's head rounding explains: the replay's own Δ_head (its logits against the same hidden
  state's fp32 product) next to what rounding each candidate logit to a bf16 ulp predicts
  (:func:`~soft_spatial.softthink.logits.rounding_delta_var`, at the measured logit magnitudes);
* the gap's distribution at soft steps (|gap| quantiles, its mean against Σ_k(e^{Δ_k} − 1 − Δ_k)),
  and how exactly Σ_k[e^{−γ_k}(e^{Δ_k} − 1) − Δ_k] from the measured Δ and the rollout's noise γ
  reproduces it (:func:`~soft_spatial.softthink.log_density_gap`);
* the discrete steps of a hard-mode run, and step 0 (the prompt's own step);
* in bf16, three injected mismatches replayed against the same records: a wrong candidate (slots
  1 and 2 swapped at every soft step), response positions shifted by one, the fed-back mixture
  perturbed (τ × 1.25): the largest |gap| each gives, against the rounding's;
* first, how the largest gap of a batch grows with its size N at a given Δ (Monte Carlo with the
  engines' noise): the bound has to hold for a training batch, not for these few hundred steps.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import math
import tempfile
import time
from pathlib import Path

import torch

from soft_spatial.engines import LocalEngine
from soft_spatial.engines import replay as replay_mod
from soft_spatial.engines.replay import replay_gaps
from soft_spatial_bench.gpu.prompts import image_prompts
from soft_spatial.models import build_tiny_model
from soft_spatial.models.shapes import QWEN3_VL_2B, parity_init
from soft_spatial.softthink import DensityConfig, SamplingConfig, SoftThinkingConfig
from soft_spatial.softthink.logits import rounding_delta_var

_VISION = dict(depth=2, hidden_size=64, intermediate_size=128, num_heads=2,
               deepstack_visual_indexes=[0])
_WIDE = {k: QWEN3_VL_2B[k] for k in ("hidden_size", "intermediate_size", "num_attention_heads",
                                     "num_key_value_heads", "head_dim", "rope_parameters",
                                     "rms_norm_eps")}
#: the models: the tiny default; Qwen3-VL-2B's text width at a few layers with the tiny init
#: (0.1 / 0.5: GPU run E's model) and with stage d's parity init (untied: the model F and D use)
MODELS = {
    "tiny": {},
    "2b-width-tiny-init": dict(_WIDE, tie_word_embeddings=True),
    "2b-width-parity": dict(_WIDE, tie_word_embeddings=False, **parity_init(2048)),
}
ARMS = (("float32", False), ("bfloat16", False), ("bfloat16", True))


def model_overrides(name: str, layers: int) -> dict:
    s = dict(MODELS[name])
    if s:
        s.update(num_hidden_layers=layers,
                 vision_config=dict(_VISION, out_hidden_size=s["hidden_size"]))
    return s


@contextlib.contextmanager
def shifted_positions(shift: int):
    """The replay's positions of response tokens moved by ``shift`` (an injected mismatch)."""
    original = replay_mod.prefill_position_ids

    def shifted(model, ids, mask, **mm):
        pos, deltas = original(model, ids, mask, **mm)
        n = int(mask.shape[-1])
        pos = pos.clone()
        pos[..., n - shifted.response:] += shift
        return pos, deltas

    shifted.response = 0
    replay_mod.prefill_position_ids = shifted
    try:
        yield shifted
    finally:
        replay_mod.prefill_position_ids = original


def _with_trace(c, **fields):
    return dataclasses.replace(c, trace=dataclasses.replace(c.trace, **fields))


def swapped_candidates(c):
    """Candidates 1 and 2 exchanged at every soft step (their recorded scores stay)."""
    ids = c.trace.topk_ids.clone()
    soft = c.trace.soft
    ids[soft, 1], ids[soft, 2] = c.trace.topk_ids[soft, 2], c.trace.topk_ids[soft, 1]
    return _with_trace(c, topk_ids=ids)


def q(x: torch.Tensor, p: float) -> float:
    return float(torch.quantile(x.double(), p)) if x.numel() else math.nan


def fmt(x: float) -> str:
    return "–" if math.isnan(x) else f"{x:.2g}" if abs(x) < 1e-2 else f"{x:.3g}"


def soft_lines(g, label: str, head_dtype: torch.dtype) -> list[str]:
    s = g.soft
    gap = g.gap[s].abs()
    dmax = g.delta.abs().max() if g.delta.numel() else torch.tensor(math.nan)
    pred_head = rounding_delta_var(g.cand_logits, 1.0, head_dtype).mean().sqrt()
    mean_pred = (torch.expm1(g.delta) - g.delta).sum(-1).mean()
    mag = g.cand_logits.abs().amax(-1)
    return [f"| {label} | {int(s.sum())} | {fmt(q(mag, .5))} / {fmt(float(mag.max()))} | "
            f"{fmt(float(g.delta.pow(2).mean().sqrt()))} / {fmt(float(dmax))} | "
            f"{fmt(float(g.delta_head.pow(2).mean().sqrt()))} / {fmt(float(pred_head))} | "
            f"{fmt(q(gap, .5))} / {fmt(q(gap, .9))} / {fmt(q(gap, .99))} / {fmt(float(gap.max()))} | "
            f"{fmt(float(g.gap[s].mean()))} / {fmt(float(mean_pred))} | "
            f"{fmt(float((g.gap[s] - g.predicted).abs().max()))} | "
            f"{fmt(float(g.gap[g.first].abs().max()))} |"]


HEADER = ["| arm | soft steps | cand. \\|ℓ\\| median / max | Δ RMS / max | Δ_head RMS / its ulp prediction "
          "| \\|gap\\| p50 / p90 / p99 / max | mean gap / Σ(e^Δ−1−Δ) | \\|gap − formula\\| max "
          "| step 0 \\|gap\\| max |",
          "|---|---|---|---|---|---|---|---|---|"]


def run_model(name: str, a, tmp: Path) -> list[str]:
    t0 = time.perf_counter()
    path = build_tiny_model(tmp / name, family="qwen3_vl", vocab="qwen", seed=0,
                            save_dtype=torch.bfloat16, **model_overrides(name, a.layers))
    prompts = image_prompts(a.prompts, 64)
    sampling = SamplingConfig(temperature=1.0, max_new_tokens=a.steps)
    fixed, hard = SoftThinkingConfig(mode="fixed"), SoftThinkingConfig(mode="hard")
    lines = [f"### {name} ({a.layers if MODELS[name] else 'tiny'} layers)", "", *HEADER]
    hard_lines, inject = [], []
    for dtype, fp32 in [arm for arm in ARMS if arm[0] in a.dtypes.split(",")]:
        eng = LocalEngine.from_pretrained(path, dtype=getattr(torch, dtype))
        density = DensityConfig(fp32_logits=fp32)
        label = dtype + (", fp32 logits" if fp32 else "")
        kw = dict(sampling=sampling, n=a.n, seed=a.seed, debug=True, density=density)
        outs = eng.generate(prompts, soft_thinking=fixed, **kw)
        g = replay_gaps(eng, prompts, outs, 1.0, 1.0, density)
        lines += soft_lines(g, label, torch.float32 if fp32 else getattr(torch, dtype))
        h = replay_gaps(eng, prompts, eng.generate(prompts, soft_thinking=hard, **kw), 1.0, 1.0,
                        density)
        gap = h.gap.abs()
        hard_lines.append(f"| {label} | {gap.numel()} | {fmt(q(gap, .5))} / {fmt(q(gap, .99))} / "
                          f"{fmt(float(gap.max()))} | {fmt(float(h.gap[h.first].abs().max()))} |")
        if dtype == "bfloat16" and not fp32:
            base = float(g.gap[g.soft].abs().max())
            swap = replay_gaps(eng, prompts, [swapped_candidates(c) for c in outs], 1.0, 1.0,
                               density)
            with shifted_positions(1) as shift:
                shifted = []
                for c in outs:
                    shift.response = len(c.token_ids) - 1
                    shifted.append(replay_gaps(eng, prompts, [c], 1.0, 1.0, density))
            tau = replay_gaps(eng, prompts, [_with_trace(c, tau=c.trace.tau * 1.25) for c in outs],
                              1.0, 1.0, density)
            worst = max(float(x.gap.abs().max()) for x in shifted)
            inject = [f"| rounding alone | {fmt(base)} |",
                      f"| candidates 1 and 2 swapped | {fmt(float(swap.gap.abs().max()))} |",
                      f"| response positions + 1 | {fmt(worst)} |",
                      f"| mixture τ × 1.25 | {fmt(float(tau.gap.abs().max()))} |"]
        del eng
    lines += ["", "Hard mode (every step discrete): |gap| of the token log-probs", "",
              "| arm | steps | \\|gap\\| p50 / p99 / max | step 0 \\|gap\\| max |", "|---|---|---|---|",
              *hard_lines, "", "bf16, injected mismatches: largest |gap| over the steps", "",
              "| replay | max \\|gap\\| |", "|---|---|", *inject, "",
              f"({time.perf_counter() - t0:.0f} s; {a.prompts} image prompts × {a.n}, "
              f"{a.steps} steps, T 1, K 5, c 1, τ 0.5)", ""]
    return lines


def tail_lines(sigmas, sizes, reps: int, seed: int = 0) -> list[str]:
    """The largest |gap| of a batch of N soft steps when every candidate's Δ is N(0, σ²) and the
    noise is the engines' (24-bit uniforms, :func:`~soft_spatial.softthink.gumbel_from_uniform`):
    median and largest over ``reps`` batches, and how often it passes 2, 5 and 10 nats."""
    from soft_spatial.softthink import gumbel_from_uniform, log_density_gap
    g = torch.Generator().manual_seed(seed)
    lines = ["| soft steps N | Δ RMS σ | largest \\|gap\\|: median / max over batches | "
             "share of batches > 2 / 5 / 10 nats |", "|---|---|---|---|"]
    for n in sizes:
        for sigma in sigmas:
            worst = []
            for _ in range(reps):
                u = torch.randint(0, 2 ** 24, (n, 5), generator=g).float() * 2.0 ** -24
                d = torch.randn(n, 5, generator=g) * sigma
                worst.append(float(log_density_gap(gumbel_from_uniform(u), d).abs().max()))
            w = torch.tensor(worst)
            lines.append(f"| {n:,} | {sigma:g} | {fmt(float(w.median()))} / {fmt(float(w.max()))} | "
                         + " / ".join(f"{float((w > b).float().mean()):.0%}" for b in (2, 5, 10))
                         + " |")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default=",".join(MODELS), help="'' for the tail table alone")
    ap.add_argument("--layers", type=int, default=4, help="language layers of the 2B-width models")
    ap.add_argument("--steps", type=int, default=48)
    ap.add_argument("--prompts", type=int, default=2)
    ap.add_argument("--n", type=int, default=4)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--dtypes", default="float32,bfloat16",
                    help="arms to run: float32 (the control), bfloat16 (with and without fp32 "
                         "logits)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=None, help="also write the tables to this file")
    ap.add_argument("--tail", default="0.05,0.1,0.2,0.37,0.5",
                    help="Δ RMS values of the tail table ('' to skip)")
    ap.add_argument("--tail-sizes", default="1000,100000,1000000")
    ap.add_argument("--tail-reps", type=int, default=12)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    lines = []
    if a.tail:
        lines += ["### The largest gap of a batch, by its size and Δ (Monte Carlo)", "",
                  *tail_lines([float(x) for x in a.tail.split(",")],
                              [int(x) for x in a.tail_sizes.split(",")], a.tail_reps), ""]
        print("\n".join(lines), flush=True)
    with tempfile.TemporaryDirectory(prefix="bf16-study-") as tmp:
        for name in filter(None, a.models.split(",")):
            lines += run_model(name, a, Path(tmp))
            print("\n".join(lines[-30:]), flush=True)
    if a.out:
        Path(a.out).write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
