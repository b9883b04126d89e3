"""A synthetic spatial benchmark in the OmniSpatial release layout: ``python -m soft_spatial.data.synthetic``.

The command line: every knob of `SyntheticConfig` as a flag, its default read from the
dataclasses, then `write_benchmark`; prints the chance levels on test."""
from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from soft_spatial.data.synthetic.config import DIFFICULTIES, TASKS, PathKnobs, SyntheticConfig
from soft_spatial.data.synthetic.release import write_benchmark


def main(argv: Sequence[str] | None = None) -> dict[str, dict[str, float]]:
    p = argparse.ArgumentParser(prog="python -m soft_spatial.data.synthetic",
                                description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, type=Path, help="output directory")
    p.add_argument("--train", type=int, default=2000, help="training questions")
    p.add_argument("--test", type=int, default=500, help="held-out questions")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--size", type=int, default=SyntheticConfig.size, help="image side (pixels)")
    p.add_argument("--tasks", default=",".join(TASKS), help="comma-separated subset of tasks")
    p.add_argument("--options", default=",".join(map(str, SyntheticConfig.options)),
                   help="allowed option counts, e.g. 4 or 2,3,4")
    p.add_argument("--difficulty", choices=sorted(DIFFICULTIES),
                   default=SyntheticConfig.difficulty_name)
    p.add_argument("--layout", choices=("grid", "free"), default=SyntheticConfig.layout,
                   help="one object per grid cell, or anywhere")
    p.add_argument("--cell", type=int, default=SyntheticConfig.cell, help="grid cell (pixels)")
    p.add_argument("--option-order", choices=("shuffled", "canonical"),
                   default=SyntheticConfig.option_order,
                   help="options in random order, or in one fixed order per task")
    p.add_argument("--describe", action="store_true",
                   help="start each question with the scene in words (needs a 3x3 grid)")
    p.add_argument("--grid", type=int, default=PathKnobs.grid, help="path tasks: board side")
    p.add_argument("--moves", type=int, default=PathKnobs.moves, help="path tasks: moves")
    p.add_argument("--blocks", type=int, default=PathKnobs.blocks, help="path tasks: grey blocks")
    p.add_argument("--pool-factor", type=int, default=PathKnobs.pool_factor,
                   help="path tasks: candidates generated per question kept")
    p.add_argument("--allow-merge", action="store_true",
                   help="path tasks: candidate paths may meet before the circle")
    for name in ("distractors", "max_count"):
        p.add_argument(f"--{name.replace('_', '-')}", type=int, default=None)
    for name in ("margin", "size_ratio"):
        p.add_argument(f"--{name.replace('_', '-')}", type=float, default=None)
    a = p.parse_args(argv)
    knobs = {k: getattr(a, k) for k in ("distractors", "max_count", "margin", "size_ratio")
             if getattr(a, k) is not None}
    cfg = SyntheticConfig(size=a.size, tasks=tuple(t for t in a.tasks.split(",") if t),
                          options=tuple(int(n) for n in a.options.split(",")),
                          difficulty=replace(DIFFICULTIES[a.difficulty], **knobs),
                          difficulty_name=a.difficulty + ("+" if knobs else ""),
                          layout=a.layout, cell=a.cell, describe=a.describe,
                          option_order=a.option_order,
                          paths=PathKnobs(grid=a.grid, moves=a.moves, blocks=a.blocks,
                                          pool_factor=a.pool_factor, allow_merge=a.allow_merge))
    chance = write_benchmark(a.out, a.train, a.test, a.seed, cfg)
    print(f"{a.out}: {a.train} train + {a.test} test questions; chance on test: "
          + ", ".join(f"{k} {v:.1f}%" for k, v in chance["test"].items()))
    return chance
