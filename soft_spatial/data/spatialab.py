"""SpatiaLab loader over a column mapping (the public schema is not yet verified; see the notes).

One table (parquet, JSONL, JSON or CSV) with one row per question. `SpatialabColumns` says which
column holds what, so the real release can be read by changing the mapping, not the code.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .checks import (RecordContext, answer_from_index, answer_from_letter, check_records, option_list, text_field,
                     verified_image, verified_image_bytes)
from .record import LETTERS, ImageRef, QuestionRecord
from .tables import TABLE_SUFFIXES, read_table

NAME = "spatialab"

#: The six categories, spelled as in the SpatiaLab README.
CATEGORIES = (
    "3D Geometry",
    "Depth & Occlusion",
    "Orientation",
    "Relative Positioning",
    "Size & Scale",
    "Spatial Navigation",
)


@dataclass(frozen=True)
class SpatialabColumns:
    """Which column holds which field.

    Attributes:
        id: id column; when absent from a row the row position is used.
        question: question text.
        options: a list column (or a JSON list string). When this column is absent from a row the
            ``option_columns`` (one option per column, e.g. ``A``..``D``) are read instead; empty
            cells are skipped.
        answer: the correct option, as a letter, as the option's text, or as an integer index.
        answer_index_base: 0 or 1 to accept integer answers; None rejects them (ambiguous).
        category / subcategory: group columns (subcategory may be absent).
        image: an image path relative to the table's directory (or absolute), raw bytes, a
            ``{"bytes": ..., "path": ...}`` struct (Hugging Face ``Image`` feature), or a list of these.
    """

    id: str = "id"
    question: str = "question"
    options: str = "options"
    option_columns: tuple[str, ...] = ("A", "B", "C", "D")
    answer: str = "answer"
    answer_index_base: int | None = None
    category: str = "category"
    subcategory: str | None = "subcategory"
    image: str = "image"


def canonical_category(name: str) -> str | None:
    """The README spelling of a category name written any common way, or None if unknown.

    ``"depth_and_occlusion"``, ``"Depth & Occlusion"`` and ``"DEPTH-OCCLUSION"`` all map to
    ``"Depth & Occlusion"``.
    """
    return _CATEGORY_KEYS.get(_category_key(name))


def _category_key(name: str) -> str:
    words = re.split(r"[^a-z0-9]+", name.lower().replace("&", " "))
    return "".join(w for w in words if w and w != "and")


_CATEGORY_KEYS = {_category_key(c): c for c in CATEGORIES}


def find_table(root: str | Path, split: str | None = None) -> Path:
    """The table to read: ``root`` itself if it is a file, else the one table in ``root`` (or
    ``root/data``), disambiguated by ``split`` appearing in the file name."""
    root = Path(root)
    if root.is_file():
        return root
    if not root.is_dir():
        raise FileNotFoundError(f"SpatiaLab root not found: {root}")
    tables = sorted(
        p for d in (root, root / "data") if d.is_dir() for p in d.iterdir() if p.suffix.lower() in TABLE_SUFFIXES
    )
    if len(tables) == 1:
        return tables[0]
    named = [p for p in tables if split and split in p.name]
    if len(named) == 1:
        return named[0]
    names = ", ".join(p.name for p in tables) or "none"
    raise FileNotFoundError(
        f"cannot choose the SpatiaLab table in {root} (split {split!r}); found: {names}. Pass the file path as root."
    )


def load_spatialab(
    root: str | Path,
    split: str | None = None,
    *,
    columns: SpatialabColumns | None = None,
    strict_categories: bool = True,
    check_images: bool = True,
) -> list[QuestionRecord]:
    """Load SpatiaLab questions from one table (see `find_table`).

    With ``strict_categories`` an unknown category is an error; category names are normalised to
    the README spelling (`canonical_category`).
    """
    columns = columns or SpatialabColumns()
    if columns.answer_index_base not in (None, 0, 1):
        raise ValueError(f"answer_index_base must be None, 0 or 1, got {columns.answer_index_base!r}")
    path = find_table(root, split)
    rows = read_table(path)
    records = [
        _parse(row, RecordContext(path, i), columns, strict_categories, check_images) for i, row in enumerate(rows)
    ]
    return check_records(records, path)


def _parse(
    row: dict[str, Any], ctx: RecordContext, cols: SpatialabColumns, strict_categories: bool, check_images: bool
) -> QuestionRecord:
    if not isinstance(row, dict):
        raise ctx.error(None, f"expected an object, got {type(row).__name__}")
    record_id = str(row[cols.id]) if row.get(cols.id) is not None else str(ctx.index)
    ctx = ctx.with_id(record_id)
    options = _options(row, cols, ctx)
    category = text_field(row, cols.category, ctx)
    canonical = canonical_category(category)
    if canonical is None and strict_categories:
        raise ctx.error(cols.category, f"unknown category {category!r}; expected one of {list(CATEGORIES)}")
    subcategory = row.get(cols.subcategory) if cols.subcategory else None
    return QuestionRecord(
        id=record_id,
        images=_images(row.get(cols.image), cols.image, ctx, check_images),
        question=text_field(row, cols.question, ctx),
        options=options,
        answer=_answer(row.get(cols.answer), options, cols, ctx),
        benchmark=NAME,
        category=canonical or category,
        subcategory=str(subcategory) if subcategory is not None else None,
    )


def _options(row: dict[str, Any], cols: SpatialabColumns, ctx: RecordContext) -> list[str]:
    value = row.get(cols.options)
    if value is not None:
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except json.JSONDecodeError as exc:
                raise ctx.error(cols.options, f"expected a list or a JSON list string: {exc}") from exc
        return option_list(value, cols.options, ctx)
    present = [c for c in cols.option_columns if c in row]
    if not present:
        raise ctx.error(cols.options, f"missing (and no option columns {list(cols.option_columns)})")
    values = [row[c] for c in cols.option_columns if row.get(c) is not None and str(row[c]).strip()]
    return option_list(values, "/".join(cols.option_columns), ctx)


def _answer(value: Any, options: list[str], cols: SpatialabColumns, ctx: RecordContext) -> str:
    """Letter answer; integer indices only when ``answer_index_base`` is set; else the option text."""
    field = cols.answer
    if value is None:
        raise ctx.error(field, "missing")
    text = value.strip() if isinstance(value, str) else None
    if text is not None and len(text) == 1 and text.isalpha():
        return answer_from_letter(text, len(options), field, ctx)
    is_index = (
        (isinstance(value, int) and not isinstance(value, bool))
        or (isinstance(value, float) and value.is_integer())
        or (text is not None and text.isdigit())
    )
    if is_index and cols.answer_index_base is not None:
        return answer_from_index(value, len(options), field, ctx, base=cols.answer_index_base)
    if text is not None and text in options:
        return LETTERS[options.index(text)]
    hint = " (set answer_index_base to 0 or 1 to accept indices)" if is_index else ""
    raise ctx.error(field, f"expected an option letter or an option's text, got {value!r}{hint}")


def _images(value: Any, field: str, ctx: RecordContext, check_images: bool) -> list[ImageRef]:
    if value is None:
        raise ctx.error(field, "missing")
    items = value if isinstance(value, list) else [value]
    if not items:
        raise ctx.error(field, "empty image list")
    return [_image(item, field, ctx, check_images) for item in items]


def _image(item: Any, field: str, ctx: RecordContext, check_images: bool) -> ImageRef:
    if isinstance(item, dict):
        if item.get("bytes"):
            item = item["bytes"]
        elif item.get("path"):
            item = item["path"]
        else:
            raise ctx.error(field, "image struct has neither bytes nor path")
    if isinstance(item, (bytes, bytearray)):
        return verified_image_bytes(bytes(item), field, ctx)
    if isinstance(item, str) and item.strip():
        path = Path(item)
        path = path if path.is_absolute() else ctx.file.parent / path
        return verified_image(path, field, ctx) if check_images else path
    raise ctx.error(field, f"expected a path, bytes or an image struct, got {type(item).__name__}")
