"""The GPU kit's stage f alone, by parts (soft_spatial/lab/gpu/graphs.py; docs/gpu.md).

    python3 scripts/gpu/stage_f.py --parts parity      # one part alone (the 10-minute limit)
    python scripts/gpu/stage_f.py --dry-run            # the logic on the CPU, tiny sizes
"""
import sys

from soft_spatial.lab.gpu.graphs import main

if __name__ == "__main__":
    sys.exit(main())
