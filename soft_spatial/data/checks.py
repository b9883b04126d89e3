"""Field checks shared by the loaders; each failure raises a `DataFormatError` naming the spot."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from collections.abc import Mapping, Sequence

from PIL import Image

from soft_spatial.data.errors import DataFormatError
from soft_spatial.data.gold import parse_letter
from soft_spatial.data.record import LETTERS, QuestionRecord


@dataclass(frozen=True)
class RecordContext:
    """Where a record lives: its file, its 0-based position in that file, (once known) its id and
    (when the loader knows it) its benchmark."""

    file: Path
    index: int
    record_id: str | None = None
    benchmark: str | None = None

    def error(self, field: str | None, message: str) -> DataFormatError:
        """An error for ``field`` of this record."""
        return DataFormatError(self.file, message, index=self.index, record_id=self.record_id, field=field)

    def with_id(self, record_id: str) -> "RecordContext":
        return RecordContext(self.file, self.index, record_id, self.benchmark)

    def image_error(self, field: str, what: str, exc: BaseException) -> DataFormatError:
        """An error for an image of this record that cannot be decoded (``what``: the file, or
        "embedded bytes"), naming the benchmark when known."""
        prefix = f"{self.benchmark} image" if self.benchmark else "image"
        return self.error(field, f"{prefix} {what} is not a readable image: {exc}")


def require(raw: Mapping[str, Any], key: str, ctx: RecordContext) -> Any:
    """``raw[key]``, or an error naming the missing field."""
    if not isinstance(raw, Mapping):
        raise ctx.error(None, f"expected an object, got {type(raw).__name__}")
    if key not in raw or raw[key] is None:
        raise ctx.error(key, "missing")
    return raw[key]


def text_field(raw: Mapping[str, Any], key: str, ctx: RecordContext) -> str:
    """A non-empty string field."""
    value = require(raw, key, ctx)
    if not isinstance(value, str) or not value.strip():
        raise ctx.error(key, f"expected a non-empty string, got {value!r}")
    return value


def option_list(value: Any, field: str, ctx: RecordContext, *, min_n: int = 2, max_n: int = 4) -> list[str]:
    """A list of ``min_n``..``max_n`` option strings."""
    if not isinstance(value, (list, tuple)) or not all(_is_scalar_text(o) for o in value):
        raise ctx.error(field, f"expected a list of strings, got {value!r}")
    value = [o if isinstance(o, str) else str(o) for o in value]
    if not min_n <= len(value) <= max_n:
        raise ctx.error(field, f"expected {min_n}-{max_n} options, got {len(value)}")
    if any(not o.strip() for o in value):
        raise ctx.error(field, f"empty option text in {list(value)!r}")
    return list(value)


def _is_scalar_text(value: Any) -> bool:
    """Strings, and numbers written without quotes (``"options": [2, 3]``)."""
    return isinstance(value, str) or (isinstance(value, (int, float)) and not isinstance(value, bool))


def answer_from_index(value: Any, n_options: int, field: str, ctx: RecordContext, *, base: int = 0) -> str:
    """Letter of an integer answer index (``base`` 0 or 1) that must address one of the options."""
    if isinstance(value, bool) or not isinstance(value, int):
        # integral floats come from CSV/pandas columns
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        elif isinstance(value, str) and value.strip().lstrip("-").isdigit():
            value = int(value.strip())
        else:
            raise ctx.error(field, f"expected an integer option index, got {value!r}")
    index = value - base
    if not 0 <= index < n_options:
        raise ctx.error(field, f"answer index {value} out of range for {n_options} options ({base}-based)")
    return LETTERS[index]


def answer_from_letter(value: Any, n_options: int, field: str, ctx: RecordContext) -> str:
    """Upper-case letter of a letter answer that must address one of the options; the forms that
    name a letter unambiguously ("B", " b ", "B.", "(B)", "B)", "Option B") are read as the letter
    (`gold.parse_letter`); anything else (a number, "B or C") is an error."""
    letter = parse_letter(value)
    if letter is None:
        raise ctx.error(field, f"expected an option letter, got {value!r}")
    if LETTERS.index(letter) >= n_options:
        raise ctx.error(field, f"answer {letter!r} out of range for {n_options} options")
    return letter


def missing_cell(value: Any) -> bool:
    """An empty table cell: None, NaN, "" or the text "nan" (how pandas prints NaN)."""
    if value is None or (isinstance(value, float) and value != value):
        return True
    return isinstance(value, str) and value.strip().lower() in ("", "nan")


def existing_file(path: Path, field: str, ctx: RecordContext) -> Path:
    """``path`` if it is a regular file (links followed); otherwise an error naming the missing
    image, or the thing that is no file (a directory, a pipe, a device)."""
    if not path.is_file():
        if path.exists():
            raise ctx.error(field, f"image path {path} is not a regular file; refused")
        raise ctx.error(field, f"image file not found: {path}")
    return path


def inside(base: Path, relative: str | Path, field: str, ctx: RecordContext) -> Path:
    """``base / relative`` if the path the table wrote stays inside ``base``, read lexically
    (``.`` and ``..`` taken off the text, no link followed; an absolute ``relative`` stands for
    itself; inside ``base`` as given or with ``base``'s own links resolved); otherwise an error
    naming the record, the field and the path. A benchmark file is someone else's: its paths must
    not lead a read outside the dataset directory. The path returned is the normalised one, so the
    ``..`` the check took off is not taken again by the file system through a link. Links inside
    the dataset are the dataset's own (whoever laid it out made them) and are followed when the
    file is read, which must be a regular file (`existing_file`): a Hugging Face hub cache,
    ``snapshots/<rev>/...`` linking into ``blobs/``, is read as it is. A NUL byte, which no path
    can hold, is an error naming the field too."""
    text = str(relative)
    if "\0" in text:
        raise ctx.error(field, f"path {text!r} holds a NUL byte, which no file name can; refused")
    root = os.path.abspath(base)
    path = os.path.normpath(os.path.join(root, text))
    if not any(path == r or path.startswith(r.rstrip(os.sep) + os.sep)
               for r in (root, os.path.realpath(base))):
        raise ctx.error(field, f"path {text!r} leads outside the dataset directory {base} "
                               f"(to {path}); refused")
    return Path(path)


def verified_image(path: Path, field: str, ctx: RecordContext) -> Path:
    """``path`` if it is a readable image, otherwise an error naming the benchmark, the record and
    the file: PIL's ``verify`` (header, chunks, PNG checksums), then a full decode, since ``verify``
    reads no JPEG scan data and a truncated JPEG would pass it to fail mid-evaluation. A JPEG is
    decoded at 1/8 scale (``draft``), which still reads every byte of its scans."""
    existing_file(path, field, ctx)
    try:
        with Image.open(path) as image:
            image.verify()
        with Image.open(path) as image:  # verify() leaves the image unusable: open it again
            image.draft(None, (1, 1))  # JPEG only: the smallest DCT scale; other formats ignore it
            image.load()
    except Exception as exc:  # PIL raises OSError, SyntaxError, ValueError, ... for bad files
        raise ctx.image_error(field, str(path), exc) from exc
    return path


def check_records(records: Sequence[QuestionRecord], file: Path) -> list[QuestionRecord]:
    """``records`` loaded from ``file`` (in file order), if there is at least one and no two share
    a key (`QuestionRecord.key`); otherwise an error naming the file and both records."""
    if not records:
        raise DataFormatError(file, "no records (an empty benchmark cannot be prepared or evaluated)")
    first: dict[str, int] = {}
    for index, record in enumerate(records):
        seen = first.setdefault(record.key, index)
        if seen != index:
            raise DataFormatError(file, f"duplicate id: record index {seen} has the same id "
                                  f"{record.key!r}", index=index, record_id=record.id, field="id")
    return list(records)
