"""Time of the reward and every answer extractor on adversarial responses of 1 MB and 10 MB.

    python scripts/bench_reward.py              # 1 MB and 10 MB
    python scripts/bench_reward.py --mb 1 4     # other sizes

Each family is a response shape that made a parser superlinear or recursive at some point
(repeated phrases, long whitespace or asterisk runs after a cue, nested or unclosed ``<answer>``
tags, hedges, many ``</think>``). The table shows the seconds of the reward (``compute_score``)
and of each extractor at the largest size, and how the slowest one grows with the size (the time
ratio of the largest to the smallest size divided by the size ratio: about 1 for linear time).
"""
from __future__ import annotations

import argparse
import time

from soft_spatial.data.extract import extract_answer
from soft_spatial.reward import compute_score

FAMILIES = {
    "article phrase": lambda n: "</think>" + "A cat is on the left. " * (n // 22),
    "hedge list": lambda n: "</think>" + "A or " * (n // 5) + "B",
    "cue + spaces": lambda n: "</think>answer" + " " * n + "x",
    "cue + asterisks": lambda n: "</think>Answer:" + "*" * n + "x",
    "answer is a + spaces": lambda n: "</think>the answer is a" + " " * n + "cat",
    "repeated cue": lambda n: "</think>" + "the answer is C " * (n // 16),
    "nested tags": lambda n: "</think>" + "<answer>" * (n // 17) + "B" + "</answer>" * (n // 17),
    "unclosed tags": lambda n: "</think>" + "<answer>" * (n // 8),
    "many </think>": lambda n: "</think>" * (n // 8) + "B",
    "option marks": lambda n: "</think>" + "A. " * (n // 3) + ";",
    "newlines": lambda n: "</think>" + "\n" * n + "B",
    "letters and dots": lambda n: "</think>" + "B." * (n // 2),
}
OPTIONS = {"options": ["left", "right", "in front", "behind"]}
CALLS = {
    "reward": lambda t: compute_score("omnispatial", t, "B", OPTIONS),
    "ours": lambda t: extract_answer("omnispatial", t, "ours", options=OPTIONS["options"]),
    "OmniSpatial official": lambda t: extract_answer("omnispatial", t, "official"),
    "MindCube official": lambda t: extract_answer("mindcube", t, "official"),
    "SpatiaLab stand-in": lambda t: extract_answer("spatialab", t, "official", options=OPTIONS["options"]),
}


def seconds(call, text: str) -> float:
    t = time.perf_counter()
    call(text)
    return time.perf_counter() - t


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, nargs="+", default=[1, 10])
    args = parser.parse_args()
    sizes = [int(mb * 1_000_000) for mb in args.mb]
    big = f"{args.mb[-1]:g} MB"
    print(f"seconds at {big}; growth = (time at {big} / time at {args.mb[0]:g} MB) / size ratio, "
          f"for the slowest callable (about 1: linear)\n")
    print("| family | " + " | ".join(CALLS) + " | growth |")
    print("|---|" + "---|" * (len(CALLS) + 1))
    worst = dict.fromkeys(CALLS, 0.0)
    for name, make in FAMILIES.items():
        texts = [make(n) for n in sizes]
        table = {label: [seconds(call, t) for t in texts] for label, call in CALLS.items()}
        slow = max(table.values(), key=lambda ts: ts[-1])
        growth = (slow[-1] / max(slow[0], 1e-9)) / (sizes[-1] / sizes[0])
        for label, ts in table.items():
            worst[label] = max(worst[label], ts[-1])
        print(f"| {name} | " + " | ".join(f"{ts[-1]:.3f}" for ts in table.values()) + f" | {growth:.2f} |")
    print(f"| **slowest** | " + " | ".join(f"**{t:.3f}**" for t in worst.values()) + " | |")


if __name__ == "__main__":
    main()
