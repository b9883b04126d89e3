"""Time of the reward and every answer extractor on adversarial responses of 1 MB and 10 MB.

    python scripts/bench_reward.py              # 1 MB and 10 MB, 3 turns
    python scripts/bench_reward.py --mb 1 4     # other sizes
    python scripts/bench_reward.py --repeats 5 --min-seconds 0.2

Each family is a response shape that made a parser superlinear or recursive at some point (repeated
phrases, long whitespace or asterisk runs after a cue, nested or unclosed ``<answer>`` tags,
hedges, many ``</think>``) or that works the negation rule (negated and refused letters, a negated
list). Per family, every callable at every size is one mode; the modes are measured in turns whose
order rotates every repeat (`soft_spatial_bench.workloads.interleaved`), one measurement being the mean of as
many consecutive calls as fill ``--min-seconds``. The table shows the minimum seconds of the reward
(``compute_score``) and of each extractor at the largest size, and how the slowest one grows with
the size (the time ratio of the largest to the smallest size divided by the size ratio: about 1 for
linear time), from the minima and from the medians, with the largest spread ((max - min) / median)
of its measurements. Goal: growth about 1 (linear time) for every family.
"""
from __future__ import annotations

import argparse
from functools import partial

from soft_spatial_bench.workloads import calls_for, interleaved, mean_seconds
from soft_spatial.data.extract import extract_answer
from soft_spatial.data.reward import compute_score

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
    "negated letters": lambda n: "</think>" + "not B. " * (n // 7),
    "refused letters": lambda n: "</think>" + "B is wrong, " * (n // 12),
    "negated list": lambda n: "</think>not " + "A or " * (n // 5) + "B",
}
OPTIONS = {"options": ["left", "right", "in front", "behind"]}
CALLS = {
    "reward": lambda t: compute_score("omnispatial", t, "B", OPTIONS),
    "ours": lambda t: extract_answer("omnispatial", t, "ours", options=OPTIONS["options"]),
    "OmniSpatial official": lambda t: extract_answer("omnispatial", t, "official"),
    "MindCube official": lambda t: extract_answer("mindcube", t, "official"),
    "SpatiaLab stand-in": lambda t: extract_answer("spatialab", t, "official", options=OPTIONS["options"]),
}


def family_timings(make, sizes, repeats: int, min_seconds: float) -> dict:
    """{(callable label, size): Timing} of one family, all callables and sizes interleaved."""
    work = {(label, n): partial(call, make(n)) for label, call in CALLS.items() for n in sizes}
    calls = {mode: calls_for(fn, min_seconds) for mode, fn in work.items()}
    return interleaved(lambda mode, _: mean_seconds(work[mode], calls[mode]), list(work), repeats)


def growth(small: float, big: float, size_ratio: float) -> float:
    return (big / max(small, 1e-9)) / size_ratio


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, nargs="+", default=[1, 10])
    parser.add_argument("--repeats", type=int, default=3, help="turns of all modes per family")
    parser.add_argument("--min-seconds", type=float, default=0.1,
                        help="least time of one measurement (consecutive calls)")
    args = parser.parse_args()
    sizes = [int(mb * 1_000_000) for mb in args.mb]
    big, ratio = f"{args.mb[-1]:g} MB", sizes[-1] / sizes[0]
    print(f"min seconds at {big} over {args.repeats} interleaved turns (each ≥ {args.min_seconds:g} "
          f"s of calls); growth = (time at {big} / time at {args.mb[0]:g} MB) / size ratio, for "
          f"the slowest callable (about 1: linear), from minima and medians; spread of its times\n")
    print("| family | " + " | ".join(CALLS) + " | growth (min) | growth (median) | spread |")
    print("|---|" + "---|" * (len(CALLS) + 3))
    worst = dict.fromkeys(CALLS, 0.0)
    for name, make in FAMILIES.items():
        t = family_timings(make, sizes, args.repeats, args.min_seconds)
        slow = max(CALLS, key=lambda label: t[label, sizes[-1]].min)
        lo, hi = t[slow, sizes[0]], t[slow, sizes[-1]]
        for label in CALLS:
            worst[label] = max(worst[label], t[label, sizes[-1]].min)
        print(f"| {name} | " + " | ".join(f"{t[label, sizes[-1]].min:.3f}" for label in CALLS)
              + f" | {growth(lo.min, hi.min, ratio):.2f} | {growth(lo.median, hi.median, ratio):.2f}"
              f" | {max(lo.spread, hi.spread):.0%} |")
    print("| **slowest** | " + " | ".join(f"**{v:.3f}**" for v in worst.values()) + " | | | |")


if __name__ == "__main__":
    main()
