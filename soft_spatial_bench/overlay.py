"""The CPU environment in which SGLang 0.5.12's real modules import (what ``tests/sglang_real``
runs in): the overlay of ``scripts/setup_sglang_overlay.sh`` and the CPU stand-ins of
``tests/sglang_stubs`` on PYTHONPATH, ``SGLANG_USE_CPU_ENGINE=1``. The CPU benchmarks re-execute
themselves in it (:func:`reexec_with_sglang_overlay`), so every process SGLang spawns has it too."""
from __future__ import annotations

import os
import sys
from pathlib import Path

__all__ = ["ROOT", "overlay_dir", "reexec_with_sglang_overlay"]

ROOT = Path(__file__).resolve().parents[1]


def overlay_dir() -> Path:
    return Path(os.environ.get("SOFT_SPATIAL_SGLANG_OVERLAY",
                               ROOT / ".venv" / "sglang-cpu-overlay"))


def reexec_with_sglang_overlay(script: str) -> None:
    """Re-execute this process (``script`` names it in the error) with the overlay and the
    stand-ins on PYTHONPATH, unless it already runs with them; exits naming the setup command
    when the overlay is missing."""
    path = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    overlay = overlay_dir()
    if str(overlay) in path and os.environ.get("SGLANG_USE_CPU_ENGINE") == "1":
        return
    if not overlay.is_dir():
        sys.exit(f"{script}: no SGLang overlay at {overlay}; run "
                 f"bash scripts/setup_sglang_overlay.sh")
    stubs = ROOT / "tests" / "sglang_stubs"
    env = dict(os.environ, SGLANG_USE_CPU_ENGINE="1", HF_HUB_OFFLINE="1",
               PYTHONPATH=os.pathsep.join([str(overlay), str(stubs)] + [p for p in path if p]))
    os.execve(sys.executable, [sys.executable, *sys.argv], env)
