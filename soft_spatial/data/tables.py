"""Read a table of records from parquet, arrow, JSONL, JSON, CSV or TSV as a list of plain dicts.

``.arrow`` is the Arrow IPC stream format that Hugging Face ``datasets`` writes for its cache and
``save_to_disk`` (the random-access file format is read too). ``.tsv`` is VLMEvalKit's format
(``pd.read_csv(path, sep="\t")``): cells may hold megabytes of base64 image data.
"""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path
from typing import Any

from soft_spatial.infra.jsonl import JSONLError, read_jsonl

from soft_spatial.data.errors import DataFormatError

TABLE_SUFFIXES = (".parquet", ".arrow", ".jsonl", ".json", ".csv", ".tsv")


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
    if suffix == ".arrow":
        return _read_arrow(path)
    if suffix in (".csv", ".tsv"):
        csv.field_size_limit(sys.maxsize)  # base64 images in VLMEvalKit TSVs
        with path.open(newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f, delimiter="\t" if suffix == ".tsv" else ",")
            return [{k: (v if v != "" else None) for k, v in row.items()} for row in reader]
    raise DataFormatError(path, f"unsupported table format {suffix!r}; expected one of {TABLE_SUFFIXES}")


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    try:
        return read_jsonl(path)
    except JSONLError as exc:
        raise DataFormatError(path, f"line {exc.line}: invalid JSON: {exc.error}") from exc


def _read_arrow(path: Path) -> list[dict[str, Any]]:
    import pyarrow as pa

    try:
        with pa.memory_map(str(path)) as source:
            return pa.ipc.open_stream(source).read_all().to_pylist()
    except pa.ArrowInvalid:
        pass
    try:
        with pa.memory_map(str(path)) as source:
            return pa.ipc.open_file(source).read_all().to_pylist()
    except pa.ArrowInvalid as exc:
        raise DataFormatError(path, f"not an Arrow IPC stream or file: {exc}") from exc
