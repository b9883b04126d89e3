"""Validate and measure the GPU path: the GPU kit's one command, its headline plan's jobs.

    python3 scripts/gpu/check.py --plan headline --lease 1.1 --out DIR --deadline 520   # a loan's call
    python3 scripts/gpu/check.py --plan headline --only A/embedded,B/softthink --out DIR
    python scripts/gpu/check.py --plan headline --dry-run --out DIR --deadline 2400      # on the CPU

The checks live in ``soft_spatial_bench/gpu/`` (the command: ``headline.py``); docs/gpu.md says
how a lent GPU machine runs them.
"""
import sys

from soft_spatial_bench.gpu.headline import main

if __name__ == "__main__":
    sys.exit(main())
