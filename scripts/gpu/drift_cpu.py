"""How far the embedded engine's fp32 run drifts from its fp64 run, per step, at several model
shapes on the CPU (same weights, seeds and image prompts; hard, fixed, adaptsoft). The evidence
for stage d's parity bound: a shape whose own fp32 run leaves the fp64 path in soft modes
amplifies rounding, whatever the engine.

    python scripts/gpu/drift_cpu.py --shapes tiny,wide,deep --steps 32 --out drift.md
"""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from soft_spatial_bench.workloads import random_controller
from soft_spatial_bench.gpu import parity
from soft_spatial_bench.gpu.measure import MODES
from soft_spatial_bench.gpu.prompts import image_prompts
from soft_spatial.models.shapes import QWEN3_VL_2B, parity_init

# text overrides (+ a 1-block vision tower whose output width is the text width)
SHAPES = {
    "tiny": {},
    # Qwen3-VL-2B's width, rope and heads, 2 of its 28 layers
    "wide": dict(QWEN3_VL_2B, num_hidden_layers=2),
    # its depth and head_dim / rope, 2 heads of 128 (hidden 256)
    "deep": dict(QWEN3_VL_2B, hidden_size=256, intermediate_size=768,
                 num_attention_heads=2, num_key_value_heads=1),
}
SHAPES["wide-std0.02"] = dict(SHAPES["wide"], init_std=0.02)
SHAPES["deep-std0.02"] = dict(SHAPES["deep"], init_std=0.02)
# per-layer gain std·√hidden 0.8 (the tiny model's) and logits of std 4
SHAPES["wide-gain0.8"] = dict(SHAPES["wide"], init_std=0.8 / 2048 ** 0.5, head_init_std=4 / 2048 ** 0.5)
SHAPES["deep-gain0.8"] = dict(SHAPES["deep"], init_std=0.8 / 256 ** 0.5, head_init_std=4 / 256 ** 0.5)
# stage d's parity model (parity_init): gain 0.32, logits of std 4
SHAPES["wide-parity"] = dict(SHAPES["wide"], **parity_init(2048))
SHAPES["deep-parity"] = dict(SHAPES["deep"], **parity_init(256))
# untied: a random tied model's final hidden state keeps its input token's embedding, whose own
# logit then dominates (one-hot mixtures: soft steps degenerate to hard ones)
SHAPES["deep-parity-untied"] = dict(SHAPES["deep-parity"], tie_word_embeddings=False)
SHAPES["wide-parity-untied"] = dict(SHAPES["wide-parity"], tie_word_embeddings=False)


def shape_overrides(name: str) -> dict:
    s = dict(SHAPES[name])
    if s:  # a small vision tower feeding the text width
        s["vision_config"] = dict(depth=2, hidden_size=64, intermediate_size=128, num_heads=2,
                                  out_hidden_size=s["hidden_size"], deepstack_visual_indexes=[0])
    return s


def main() -> None:
    import torch

    from soft_spatial.models import build_tiny_model
    from soft_spatial.models.shapes import check_config
    from soft_spatial.softthink import SamplingConfig, SoftThinkingConfig
    from transformers import AutoConfig
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shapes", default="tiny,wide,deep")
    ap.add_argument("--steps", type=int, default=32)
    ap.add_argument("--prompts", type=int, default=2)
    ap.add_argument("--n", type=int, default=2)
    ap.add_argument("--every", type=int, default=4, help="print every k-th step")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    torch.set_num_threads(2)
    lines = []
    confs = {m: SoftThinkingConfig(mode=m) for m in MODES}
    sampling = SamplingConfig(temperature=0.8, max_new_tokens=a.steps)
    prompts = image_prompts(a.prompts, 96)
    for name in a.shapes.split(","):
        with tempfile.TemporaryDirectory(prefix="drift-") as tmp:
            t0 = time.perf_counter()
            model = build_tiny_model(Path(tmp) / "m", family="qwen3_vl", vocab="qwen",
                                     **shape_overrides(name))
            cfg = check_config(AutoConfig.from_pretrained(model), name)
            text = cfg.text_config
            ctrl = Path(tmp) / "ctrl.pt"
            random_controller(text.hidden_size).save(ctrl)
            runs = parity.local_runs(model, "cpu", confs, prompts, sampling, a.n, seed=7,
                                     controller=ctrl)
            lines += ["", f"## {name}: hidden {text.hidden_size}, {text.num_hidden_layers} layers, "
                          f"head_dim {text.head_dim}, {a.prompts} image prompts × {a.n}, "
                          f"{a.steps} steps, T 0.8 ({time.perf_counter() - t0:.0f} s)", ""]
            for m in MODES:
                r32, r64 = runs[m]["float32"], runs[m]["float64"]
                same = sum(parity.same_path(x, y) for x, y in zip(r32, r64))
                soft = sum(int(r.trace.soft.sum()) for r in r64)
                mix = torch.cat([torch.softmax(r.trace.scores / r.trace.tau[:, None], -1).max(-1).values[r.trace.soft]
                                 for r in r64])  # the mixture's largest weight at soft steps
                top = f", mean top mixture weight {float(mix.mean()):.3f}" if mix.numel() else ""
                first = parity.first_divergence(r32, r64, float("inf"))
                lines.append(f"{m}: fp32 on the fp64 path {same}/{len(r64)} rows, soft steps "
                             f"{soft}/{sum(len(r.token_ids) for r in r64)}; first path "
                             f"divergence: {parity.describe(first, ('fp32', 'fp64'))}{top}")
                for f, v in parity.per_step_deltas(r32, r64).items():
                    lines.append(f"    max|Δ {f}| every {a.every} steps: {parity.curve(v, a.every)}")
            print("\n".join(lines[-14:]), flush=True)
    if a.out:
        Path(a.out).write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
