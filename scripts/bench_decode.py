"""Decode throughput of hard, fixed-soft and adaptsoft decoding in one run (ratios to hard).

    python scripts/bench_decode.py                 # batch 8 prompts × G=8, real Qwen vocabulary
    python scripts/bench_decode.py --steps 64 --prompts 8 --n 8 --vocab qwen --repeats 5
    python scripts/bench_decode.py --prompts 4 --n 4 --steps 32   # smaller (a shared machine)

All three modes decode the same prompts for the same number of steps (end-of-sequence is ignored
so every row runs `--steps` tokens) with a tiny random Qwen3-VL, in one engine. One measurement is
one whole batched ``generate`` (seconds, so the same token count per mode); the modes are measured
in turns whose order rotates every repeat (`soft_spatial_bench.workloads.interleaved`), after a warm-up
generate per mode. Prints min, median and spread of the seconds per mode with the time ratios to
hard of the minima, of the medians and paired per turn (`soft_spatial_bench.workloads.paired_ratio`),
tokens/s (from the minima and the medians), and where the
time goes per decode step, averaged over the repeats (prefill, sampling incl. top-K / Gumbel /
controller, mixture embedding, transformer forward). Goal on a CPU: soft/hard throughput >= 0.9
(time ratio <= 1.11).
"""
from __future__ import annotations

import argparse
import tempfile
import time
from collections import Counter
from pathlib import Path

import torch
from PIL import Image

from soft_spatial_bench.workloads import interleaved, ratio_lines
from soft_spatial.engines import LocalEngine
from soft_spatial.models import build_tiny_model
from soft_spatial.softthink import AdaptSoft, SamplingConfig, SoftThinkingConfig


def prompts(k: int):
    out = []
    for i in range(k):
        img = Image.new("RGB", (64 + 16 * (i % 3), 96), (40 * i % 255, 90, 200 - 20 * i % 200))
        out.append([{"role": "user", "content": [
            {"type": "image", "image": img},
            {"type": "text", "text": f"Question {i}: where is the object? A. left B. right"}]}])
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", help="model directory (default: build a tiny Qwen3-VL)")
    ap.add_argument("--vocab", default="qwen", choices=["qwen", "small"])
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--n", type=int, default=8, help="samples per prompt (GRPO's G)")
    ap.add_argument("--steps", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=5, help="turns of the three modes")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0 = default)")
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    path = a.model
    if path is None:
        path = Path(tempfile.mkdtemp()) / "tiny"
        build_tiny_model(path, family="qwen3_vl", vocab=a.vocab)
    eng = LocalEngine.from_pretrained(path, max_batch_rows=a.prompts * a.n)
    eng.eos_ids = []  # fixed-length decoding: every mode runs the same number of steps
    ctrl = AdaptSoft(eng.hidden_size)
    eng.set_controller(ctrl.to_state())
    ps = prompts(a.prompts)
    sampling = SamplingConfig(max_new_tokens=a.steps)
    modes = {"hard": SoftThinkingConfig(mode="hard"), "fixed": SoftThinkingConfig(mode="fixed"),
             "adaptsoft": SoftThinkingConfig(mode="adaptsoft")}
    for soft in modes.values():  # warm-up
        eng.generate(ps[:1], soft_thinking=soft, sampling=SamplingConfig(max_new_tokens=4))
    parts = {name: Counter() for name in modes}  # seconds per part, summed over the repeats
    tokens = {}

    def measure(name, rep):
        totals = eng.enable_timing()
        t0 = time.perf_counter()
        outs = eng.generate(ps, soft_thinking=modes[name], sampling=sampling, n=a.n, seed=rep)
        dt = time.perf_counter() - t0
        parts[name].update(dict(totals, other=dt - sum(totals.values())))
        tokens[name] = sum(len(o.token_ids) for o in outs)
        return dt

    timings = interleaved(measure, list(modes), a.repeats)
    eng.enable_timing(False)
    rows = a.prompts * a.n
    print(f"model {path} | batch {a.prompts} prompts × G={a.n} = {rows} rows | {a.steps} steps "
          f"| torch threads {torch.get_num_threads()} | {a.repeats} interleaved turns")
    print("\n".join(ratio_lines(timings, "hard")))
    print(f"{'mode':>10} {'tok/s min':>10} {'tok/s med':>10} | per step ms: {'sample':>7} "
          f"{'mixture':>8} {'forward':>8} {'other':>7} | prefill s")
    for name, t in timings.items():
        tot = {k: v / a.repeats for k, v in parts[name].items()}
        per = {k: 1e3 * tot.get(k, 0.0) / a.steps for k in ("sample", "mixture", "forward",
                                                              "other")}
        print(f"{name:>10} {tokens[name] / t.min:10.1f} {tokens[name] / t.median:10.1f} | "
              f"{'':13}{per['sample']:7.2f} {per['mixture']:8.2f} {per['forward']:8.2f} "
              f"{per['other']:7.2f} | {tot.get('prefill', 0.0):.2f}")
    for name in ("fixed", "adaptsoft"):  # the goal, as throughput ratios (same tokens per mode)
        t, h = timings[name], timings["hard"]
        print(f"{name}/hard throughput: {h.min / t.min:.2f} (minima), {h.median / t.median:.2f} "
              f"(medians); goal >= 0.9")


if __name__ == "__main__":
    main()
