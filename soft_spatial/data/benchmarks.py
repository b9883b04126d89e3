"""`load_benchmark`: one entry point over the three benchmark loaders; `source_file`: the table
file each one reads."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from .mindcube import find_jsonl, load_mindcube
from .omnispatial import find_release, load_omnispatial
from .record import QuestionRecord
from .spatialab import find_table, load_spatialab

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


def source_file(name: str, root: str | Path, split: str | None = None) -> Path:
    """The table file `load_benchmark` reads for ``name`` (its fingerprint identifies the data)."""
    key = name.lower()
    if key not in LOADERS:
        raise ValueError(f"unknown benchmark {name!r}; expected one of {list(BENCHMARKS)}")
    split = split if split is not None else LOADERS[key][1]
    if key == "omnispatial":
        return find_release(root, split) / "data.json"
    if key == "mindcube":
        return find_jsonl(root, split)[0]
    return find_table(root, split)
