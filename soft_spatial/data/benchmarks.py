"""`load_benchmark`: one entry point over the three benchmark loaders."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from .mindcube import load_mindcube
from .omnispatial import load_omnispatial
from .record import QuestionRecord
from .spatialab import load_spatialab

#: benchmark name -> (loader, default split)
LOADERS: dict[str, tuple[Callable[..., list[QuestionRecord]], str | None]] = {
    "omnispatial": (load_omnispatial, "test"),
    "spatialab": (load_spatialab, None),
    "mindcube": (load_mindcube, "tinybench"),
}

BENCHMARKS = tuple(LOADERS)


def load_benchmark(name: str, root: str | Path, split: str | None = None, **kwargs: Any) -> list[QuestionRecord]:
    """Load ``name`` ("omnispatial", "spatialab" or "mindcube") from a local directory or file.

    ``split`` defaults to the benchmark's evaluation set (OmniSpatial "test", MindCube
    "tinybench", SpatiaLab: the only table). Extra keyword arguments go to the loader, e.g.
    ``columns=SpatialabColumns(...)`` or ``check_images=False``.
    """
    key = name.lower()
    if key not in LOADERS:
        raise ValueError(f"unknown benchmark {name!r}; expected one of {list(BENCHMARKS)}")
    loader, default_split = LOADERS[key]
    return loader(root, split if split is not None else default_split, **kwargs)
