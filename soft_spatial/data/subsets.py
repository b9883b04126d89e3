"""Task-type subsets of a benchmark (the paper's Table 4 protocol: train and evaluate on
OmniSpatial's Perspective_Taking split only).

A name selects the records whose ``category`` (OmniSpatial ``task_type``) or ``subcategory``
(``sub_task_type``) equals it, so ``Perspective_Taking`` and ``Egocentric`` both work. Used by
``python -m soft_spatial.data.prepare --task-types``, by training (``data.task_types=[...]``,
:func:`filter_parquet` on verl's parquet) and by evaluation (``task_types=[...]``).
"""
from __future__ import annotations

import os
from pathlib import Path
from collections.abc import Iterable, Sequence

from soft_spatial.data.record import QuestionRecord

__all__ = ["normalise_task_types", "matches", "subset_indices", "count_rows", "filter_parquet"]


def normalise_task_types(task_types) -> list[str] | None:
    """None / empty → None (everything); a string → [string]; otherwise a list of strings."""
    if task_types is None:
        return None
    if isinstance(task_types, str):
        task_types = [task_types]
    names = [str(t) for t in task_types]
    return names or None


def matches(category: str | None, subcategory: str | None, task_types) -> bool:
    """Whether a record of (category, subcategory) belongs to the subset ``task_types``."""
    names = normalise_task_types(task_types)
    return names is None or category in names or (subcategory is not None and subcategory in names)


def _check_known(task_types: Sequence[str], available: Iterable[str], where: str) -> None:
    available = sorted({a for a in available if a})
    unknown = [t for t in task_types if t not in available]
    if unknown:
        raise ValueError(f"{where}: no records of task type {unknown}; available task types "
                         f"and sub-types: {available}")


def subset_indices(records: Sequence[QuestionRecord], task_types, where: str = "benchmark"
                   ) -> list[int]:
    """Positions of the records in the subset (all of them for ``task_types`` None). A name that
    matches no record is an error naming the available ones."""
    names = normalise_task_types(task_types)
    if names is None:
        return list(range(len(records)))
    _check_known(names, [r.category for r in records] + [r.subcategory or "" for r in records],
                 where)
    return [i for i, r in enumerate(records) if matches(r.category, r.subcategory, names)]


def _subset(src, task_types, columns=None):
    """(the table of verl parquet ``src``, or only its ``columns``; the mask of its rows in the
    subset ``task_types``), every name checked against the rows' task types."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    names = normalise_task_types(task_types)
    if names is None:
        raise ValueError("filter_parquet needs at least one task type")
    src = Path(src)
    if not src.is_file():
        raise FileNotFoundError(f"training parquet not found: {src}")
    if "extra_info" not in pq.read_schema(src).names:
        raise ValueError(f"{src}: no extra_info column (was it written by "
                         f"python -m soft_spatial.data.prepare?)")
    table = pq.read_table(src, columns=columns)
    extra = table.column("extra_info").combine_chunks()
    try:
        task = extra.field("task_type")
        sub = extra.field("sub_task_type")
    except KeyError as e:
        raise ValueError(f"{src}: extra_info has no task_type/sub_task_type field") from e
    _check_known(names, task.to_pylist() + sub.to_pylist(), str(src))
    return table, pc.or_(pc.is_in(task, value_set=_array(names)), pc.is_in(sub, value_set=_array(names)))


def count_rows(src, task_types) -> int:
    """The rows of verl parquet ``src`` that `filter_parquet` would keep, counted without writing
    anything (only the ``extra_info`` column is read): a command checks a subset before it writes."""
    import pyarrow.compute as pc

    _, keep = _subset(src, task_types, columns=["extra_info"])
    return int(pc.sum(keep).as_py() or 0)


def filter_parquet(src, dst, task_types) -> int:
    """Write the rows of verl parquet ``src`` whose ``extra_info.task_type`` or
    ``extra_info.sub_task_type`` is in ``task_types`` to ``dst`` (atomically); returns the row
    count. Every name must match some row of ``src``."""
    import pyarrow.parquet as pq

    table, keep = _subset(src, task_types)
    out = table.filter(keep)
    dst = Path(dst)
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_name(dst.name + ".tmp")
    pq.write_table(out, tmp)
    os.replace(tmp, dst)
    return out.num_rows


def _array(names: Sequence[str]):
    import pyarrow as pa

    return pa.array(list(names), type=pa.string())
