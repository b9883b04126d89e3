"""Matplotlib without a display (Agg), one place for the figures' common setup."""
from __future__ import annotations

from pathlib import Path

__all__ = ["pyplot", "save"]


def pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save(fig, path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    pyplot().close(fig)
    return path
