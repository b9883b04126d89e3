"""What the GPU kit's measurements share (soft_spatial_bench/gpu/measure.py): the versions line names
every package, read from the installed distributions without importing them."""
from __future__ import annotations

import subprocess
import sys

import torch

from soft_spatial_bench.gpu import measure


def test_versions_name_every_package():
    import platform

    parts = measure.versions().split(", ")
    assert parts[0] == f"Python {platform.python_version()}" and f"torch {torch.__version__}" in parts
    assert [p.split(" ")[0] for p in parts[1:]] == ["torch", "transformers", "verl", "ray", "sglang"]


def test_versions_import_none_of_the_packages():
    code = ("import sys; from importlib import metadata; from soft_spatial_bench.gpu.measure import versions; "
            "line = versions(); "
            "print([m for m in ('torch', 'transformers', 'verl', 'ray') if m in sys.modules]); "
            "print(f'torch {metadata.version(\"torch\")}' in line.split(', '))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["[]", "True"], out.stdout + out.stderr
