"""Read a table of records from parquet, JSONL, JSON or CSV as a list of plain dicts."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

from .errors import DataFormatError

TABLE_SUFFIXES = (".parquet", ".jsonl", ".json", ".csv")


def read_table(path: str | Path) -> list[dict[str, Any]]:
    """Rows of ``path`` as dicts; the format is chosen by the file suffix.

    Parquet keeps list and binary columns as Python lists and bytes. CSV cells are strings and
    empty cells become None. Malformed input raises `DataFormatError` naming the file (and line).
    """
    path = Path(path)
    suffix = path.suffix.lower()
    if not path.is_file():
        raise FileNotFoundError(f"no such file: {path}")
    if suffix == ".parquet":
        import pyarrow.parquet as pq

        return pq.read_table(path).to_pylist()
    if suffix == ".jsonl":
        return _read_jsonl(path)
    if suffix == ".json":
        try:
            rows = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise DataFormatError(path, f"invalid JSON: {exc}") from exc
        if not isinstance(rows, list):
            raise DataFormatError(path, f"expected a JSON list of records, got {type(rows).__name__}")
        return rows
    if suffix == ".csv":
        with path.open(newline="", encoding="utf-8") as f:
            return [{k: (v if v != "" else None) for k, v in row.items()} for row in csv.DictReader(f)]
    raise DataFormatError(path, f"unsupported table format {suffix!r}; expected one of {TABLE_SUFFIXES}")


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    rows = []
    with path.open(encoding="utf-8") as f:
        for line_no, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise DataFormatError(path, f"line {line_no}: invalid JSON: {exc}") from exc
    return rows
