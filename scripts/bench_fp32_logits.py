"""What ``density.fp32_logits`` costs: the output head's product and the log-softmax over the
vocabulary, with the head in bf16 (as a bf16 model computes it, the logits then upcast) against
the same product in fp32 from the bf16 operands (SGLang's ``enable_fp32_lm_head``, the actor's
``softthink.logits.fp32_head``), in one run, interleaved, with paired ratios.

    python scripts/bench_fp32_logits.py                     # Qwen3-VL-2B's head (2048 × 151,936)
    python scripts/bench_fp32_logits.py --hidden 4096 --repeats 7

Three shapes: decode batches of 8 and 64 rows (forward: the rollout's sampler reads the logits),
and a training micro-batch of 512 response tokens (forward and backward through the head, as
the actor's update does). A CPU measures CPU kernels (here oneDNN with AMX for bf16): the ratio
says nothing about a GPU's tensor cores, where fp32 without TF32 runs at a fraction of bf16's
rate and SGLang converts the whole head to fp32 at every step (docs/sglang.md, "bf16 and the
replay check").
"""
from __future__ import annotations

import argparse

import torch

from soft_spatial_bench.workloads import calls_for, interleaved, mean_seconds, ratio_lines
from soft_spatial.softthink.logits import head_logits


def step(head, h, fp32: bool, backward: bool):
    """Logits and their log-softmax over the vocabulary (fp32), with a backward when asked."""
    logp = torch.log_softmax(head_logits(head, h, fp32).float(), -1)
    if backward:
        logp[:, 0].sum().backward()
    return logp


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--vocab", type=int, default=151936)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--min-seconds", type=float, default=0.5, help="per measurement")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    head = torch.nn.Linear(a.hidden, a.vocab, bias=False).to(torch.bfloat16)
    print(f"head {a.vocab} x {a.hidden} bf16, {torch.get_num_threads()} threads")
    for rows, backward in ((8, False), (64, False), (512, True)):
        h = torch.randn(rows, a.hidden).bfloat16().requires_grad_(backward)
        head.weight.requires_grad_(backward)
        calls = {}
        modes = ("bf16 head", "fp32 head")

        def fn(mode):
            def run():
                with torch.set_grad_enabled(backward):
                    step(head, h, mode == "fp32 head", backward)
            return run

        def measure(mode, _r):
            run = fn(mode)
            if mode not in calls:
                calls[mode] = calls_for(run, a.min_seconds)
            return mean_seconds(run, calls[mode])

        t = interleaved(measure, modes, a.repeats)
        what = "forward + backward" if backward else "forward"
        print(f"\n{rows} rows, {what}:")
        print("\n".join(ratio_lines(t, "bf16 head")))


if __name__ == "__main__":
    main()
