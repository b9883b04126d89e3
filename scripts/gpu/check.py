"""Validate and measure the GPU path in one command, writing a Markdown report.

    python3 scripts/gpu/check.py --plan headline --out DIR --deadline 540   # one call: F, D, E
    python3 scripts/gpu/check.py --stages a,b --out report.md                # chosen stages
    python scripts/gpu/check.py --plan headline --dry-run --out DIR          # the plan on the CPU

The checks live in ``soft_spatial/bench/gpu/`` (the headline plan: ``headline.py``; the stages:
``stages.py``); docs/gpu.md says how a lent GPU machine runs them.
"""
import sys

from soft_spatial.bench.gpu.stages import main

if __name__ == "__main__":
    sys.exit(main())
