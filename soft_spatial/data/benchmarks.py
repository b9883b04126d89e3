"""`load_benchmark`: one entry point over every published layout of the three benchmarks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from soft_spatial.data import layouts
from soft_spatial.data.record import QuestionRecord

#: benchmark -> default split (its evaluation set)
DEFAULT_SPLITS: dict[str, str | None] = {"omnispatial": "test", "spatialab": None, "mindcube": "tinybench"}

BENCHMARKS = tuple(DEFAULT_SPLITS)


def load_benchmark(name: str, root: str | Path, split: str | None = None, **kwargs: Any) -> list[QuestionRecord]:
    """Load ``name`` ("omnispatial", "spatialab" or "mindcube") from a local directory or file.

    The layout is recognised from the files (`soft_spatial.data.layouts`): the benchmarks' own
    releases, the MindCube VAGEN JSONL, lmms-eval's parquet/arrow snapshots and VLMEvalKit's TSVs.
    ``split`` defaults to the benchmark's evaluation set (OmniSpatial "test", MindCube
    "tinybench", SpatiaLab: the only table). Extra keyword arguments: ``image_root=``,
    ``check_images=False``, and for SpatiaLab ``columns=SpatialabColumns(...)``.
    """
    key = name.lower()
    if key not in DEFAULT_SPLITS:
        raise ValueError(f"unknown benchmark {name!r}; expected one of {list(BENCHMARKS)}")
    return layouts.load(root, key, split if split is not None else DEFAULT_SPLITS[key], **kwargs)


def source_files(name: str, root: str | Path, split: str | None = None) -> tuple[Path, ...]:
    """The table file(s) `load_benchmark` reads for ``name`` (their hashes identify the data)."""
    key = name.lower()
    if key not in DEFAULT_SPLITS:
        raise ValueError(f"unknown benchmark {name!r}; expected one of {list(BENCHMARKS)}")
    return layouts.detect(Path(root), key, split if split is not None else DEFAULT_SPLITS[key]).files
