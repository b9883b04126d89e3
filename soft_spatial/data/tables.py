"""Read a table of records from parquet, arrow, JSONL, JSON, CSV or TSV as a list of plain dicts.

``.arrow`` is the Arrow IPC stream format that Hugging Face ``datasets`` writes for its cache and
``save_to_disk`` (the random-access file format is read too). ``.tsv`` is VLMEvalKit's format
(``pd.read_csv(path, sep="\t")``): cells may hold megabytes of base64 image data.
"""

from __future__ import annotations

import csv
import json
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from soft_spatial.infra.jsonl import JSONLError, read_jsonl

from soft_spatial.data.errors import DataFormatError

TABLE_SUFFIXES = (".parquet", ".arrow", ".jsonl", ".json", ".csv", ".tsv")

#: the shard suffix of a file stem, as Hugging Face snapshots name shards: ``test-00000-of-00002``
SHARD = re.compile(r"-(\d{5})-of-(\d{5})$")


def shard_of(path: str | Path) -> tuple[str, int, int] | None:
    """(the table's stem without the shard suffix, shard index, shard count) of a shard file such
    as ``test-00001-of-00002.parquet``; None for a file not named as a shard."""
    path = Path(path)
    match = SHARD.search(path.stem)
    if match is None:
        return None
    return path.stem[: match.start()], int(match.group(1)), int(match.group(2))


def check_shards(files: Sequence[str | Path]) -> list[Path]:
    """``files``, the files of one table in one directory (one file, or the shards
    ``x-NNNNN-of-MMMMM`` of one set), in shard order, if the set is whole: every shard
    ``00000`` .. ``MMMMM - 1`` present once, all of them agreeing on ``MMMMM``, and no file of the
    table that is not a shard beside them. Otherwise a `DataFormatError` naming the directory and the
    missing (or conflicting) file names: a shard lost to an interrupted download must not be scored
    as if the shards present were the whole benchmark."""
    files = sorted(Path(f) for f in files)
    shards = {f: shard_of(f) for f in files}
    if not any(shards.values()):
        return files
    directory = files[0].parent
    names = ", ".join(f.name for f in files)
    plain = [f.name for f, s in shards.items() if s is None]
    if plain:
        raise DataFormatError(directory, f"the table {', '.join(plain)} lies beside shards of the same name "
                              f"({names}); keep either the whole table or its shards")
    counts = sorted({s[2] for s in shards.values()})
    if len(counts) > 1:
        raise DataFormatError(directory, f"the shards of one table disagree on the shard count "
                              f"({', '.join(f'{c:05d}' for c in counts)}): {names}; download the table again")
    count = counts[0]
    stem, _, _ = next(iter(shards.values()))
    suffix = files[0].suffix
    by_index: dict[int, list[Path]] = {}
    for f, (_, index, _) in shards.items():
        by_index.setdefault(index, []).append(f)
    past = [f.name for i, fs in sorted(by_index.items()) if i >= count for f in fs]
    twice = [f.name for i, fs in sorted(by_index.items()) if len(fs) > 1 for f in fs]
    if past or twice:
        problem = (f"shard index past the count of {count:05d}: {', '.join(past)}" if past
                   else f"one shard in several files: {', '.join(twice)}")
        raise DataFormatError(directory, f"inconsistent sharded table ({problem}; all files: {names}); "
                              f"download the table again")
    missing = [f"{stem}-{i:05d}-of-{count:05d}{suffix}" for i in range(count) if i not in by_index]
    if missing:
        raise DataFormatError(directory, f"incomplete sharded table: missing {len(missing)} of {count} shards: "
                              f"{', '.join(missing)} (present: {names}); an interrupted download? Download "
                              f"the missing shards before loading it")
    return files


def shard_set(path: str | Path) -> list[Path]:
    """The files of the table that file ``path`` belongs to: for a shard, every shard of its set
    (the shard files of its directory with its stem, whatever their count), checked whole by
    `check_shards`; any other file alone."""
    path = Path(path)
    shard = shard_of(path)
    if shard is None:
        return [path]
    siblings = [p for p in path.parent.iterdir()
                if p.is_file() and p.suffix.lower() in TABLE_SUFFIXES and (shard_of(p) or ("",))[0] == shard[0]]
    return check_shards(siblings)


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
    if suffix == ".arrow":
        return _read_arrow(path)
    if suffix in (".jsonl", ".json", ".csv", ".tsv"):
        try:
            return _read_text_table(path, suffix)
        except UnicodeDecodeError as exc:
            raise _not_utf8(path) from exc
    raise DataFormatError(path, f"unsupported table format {suffix!r}; expected one of {TABLE_SUFFIXES}")


def _read_text_table(path: Path, suffix: str) -> list[dict[str, Any]]:
    """Rows of a JSONL, JSON, CSV or TSV file (UTF-8 text)."""
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
    csv.field_size_limit(sys.maxsize)  # base64 images in VLMEvalKit TSVs
    with path.open(newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f, delimiter="\t" if suffix == ".tsv" else ",")
        return [{k: (v if v != "" else None) for k, v in row.items()} for row in reader]


def _not_utf8(path: Path) -> DataFormatError:
    """The error for a text table that is not UTF-8, naming the line and column of its first bad
    byte (a decoder's own error names neither the file nor the line)."""
    data = path.read_bytes()
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        return DataFormatError(path, f"line {line}: not UTF-8: byte 0x{data[exc.start]:02x} at column {column} "
                                     f"({exc.reason}); save the file as UTF-8")
    return DataFormatError(path, "not UTF-8; save the file as UTF-8")  # changed while it was read


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
