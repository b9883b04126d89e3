"""SpatiaLab loader over a column mapping (the public schema is NOT verified: no data file,
loader or card of ``ciol-research/SpatiaLab`` could be read; see
docs/notes/benchmark-layouts.md §3).

One table (parquet, arrow, JSONL, JSON, CSV or TSV) with one row per question. `SpatialabColumns`
says which column holds what, so the real release can be read by changing the mapping, not the
code. What the paper documents (App. J) is built in: multiple-choice answers are 1-based option
numbers (``answer_index_base=1``), and a missing option is an empty cell printed as ``nan``:
such options are dropped and the remaining ones relabelled A, B, ... in order, the answer
following its option.

An answer cell can be read two ways: by position (a letter, or an option number under
``answer_index_base``) and as an option's text. Where only one reading names an option, it is
the answer. Where both do and they differ ("3" among the options "2", "3", "4", "5": option
number 3 is "4", the text "3" is option B), the gold letter would be a guess, and a mislabelled
gold answer corrupts every number computed on it: by default (``ambiguous_answer="skip"``) the
record is left out with a `SkippedRecord` warning naming file, record, field and both readings
(the evaluation counts and lists it in its summary and table); ``"index"`` or ``"text"`` says
which reading the release uses, once its schema is known.
"""

from __future__ import annotations

import json
import re
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from soft_spatial.data.checks import (RecordContext, answer_from_index, answer_from_letter, check_records,
                                      missing_cell, option_list, text_field)
from soft_spatial.data.errors import DataFormatError, SkippedRecord
from soft_spatial.data.gold import parse_letter
from soft_spatial.data.image_refs import image_refs
from soft_spatial.data.record import LETTERS, ImageRef, QuestionRecord
from soft_spatial.data.tables import TABLE_SUFFIXES, read_table, shard_set

NAME = "spatialab"
#: the values of `SpatialabColumns.ambiguous_answer`
AMBIGUOUS_ANSWER = ("skip", "index", "text")


class AmbiguousAnswer(DataFormatError):
    """An answer cell whose reading by position and whose reading as an option's text name
    different options."""

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
        answer: the correct option, as a letter, as the option's text, or as an integer option
            number (an index into the options as published, missing ones included).
        answer_index_base: base of integer answers: 1 (the paper's numbering, the default), 0, or
            None to reject them (a number is then read as an option's text only).
        ambiguous_answer: what to do with an answer cell whose two readings name different
            options (by position: a letter or an option number; and as an option's text, "3"
            among "2", "3", "4", "5"): ``"skip"`` (the default) leaves the record out with a
            `SkippedRecord` warning naming it and both readings; ``"index"`` takes the reading by
            position, ``"text"`` the option's text (for a release whose schema says which).
        category / subcategory: group columns (subcategory may be absent).
        image: an image path relative to the table's directory (or absolute), raw bytes, a
            ``{"bytes": ..., "path": ...}`` struct (Hugging Face ``Image`` feature), or a list of these.
    """

    id: str = "id"
    question: str = "question"
    options: str = "options"
    option_columns: tuple[str, ...] = ("A", "B", "C", "D")
    answer: str = "answer"
    answer_index_base: int | None = 1
    ambiguous_answer: str = "skip"
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
    ``root/data``), disambiguated by ``split`` appearing in the file name. A shard
    (``x-00000-of-00002.jsonl``) is read only as a whole one-shard table (`_whole`)."""
    root = Path(root)
    if root.is_file():
        return _whole(root)
    if not root.is_dir():
        raise FileNotFoundError(f"SpatiaLab root not found: {root}")
    tables = sorted(
        p for d in (root, root / "data") if d.is_dir() for p in d.iterdir() if p.suffix.lower() in TABLE_SUFFIXES
    )
    if len(tables) == 1:
        return _whole(tables[0])
    named = [p for p in tables if split and split in p.name]
    if len(named) == 1:
        return _whole(named[0])
    names = ", ".join(p.name for p in tables) or "none"
    raise FileNotFoundError(
        f"cannot choose the SpatiaLab table in {root} (split {split!r}); found: {names}. Pass the file path as root."
    )


def _whole(table: Path) -> Path:
    """``table``, unless it is a shard of a set with a shard missing (an error naming them,
    `shard_set`) or one shard of several: this loader reads one file, and a part of the benchmark
    must not be scored as if it were all of it."""
    shards = shard_set(table)
    if len(shards) > 1:
        raise DataFormatError(table.parent, f"{table.name} is one of {len(shards)} shards "
                              f"({', '.join(p.name for p in shards)}); the SpatiaLab loader reads one "
                              f"table: join the shards into one file and pass that")
    return table


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
    if columns.ambiguous_answer not in AMBIGUOUS_ANSWER:
        raise ValueError(f"ambiguous_answer must be one of {', '.join(AMBIGUOUS_ANSWER)}, got "
                         f"{columns.ambiguous_answer!r}")
    path = find_table(root, split)
    rows = read_table(path)
    records = []
    for i, row in enumerate(rows):
        try:
            records.append(_parse(row, RecordContext(path, i, benchmark=NAME), columns, strict_categories,
                                  check_images))
        except AmbiguousAnswer as exc:  # ambiguous_answer="skip"
            warnings.warn(SkippedRecord(exc), stacklevel=2)
    return check_records(records, path)


def _parse(
    row: dict[str, Any], ctx: RecordContext, cols: SpatialabColumns, strict_categories: bool, check_images: bool
) -> QuestionRecord:
    if not isinstance(row, dict):
        raise ctx.error(None, f"expected an object, got {type(row).__name__}")
    record_id = str(row[cols.id]) if row.get(cols.id) is not None else str(ctx.index)
    ctx = ctx.with_id(record_id)
    options, slots = _options(row, cols, ctx)
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
        answer=_answer(row.get(cols.answer), options, slots, cols, ctx),
        benchmark=NAME,
        category=canonical or category,
        subcategory=str(subcategory) if subcategory is not None else None,
    )


def _options(row: dict[str, Any], cols: SpatialabColumns, ctx: RecordContext) -> tuple[list[str], list[int | None]]:
    """(option texts, each published slot's index among the kept options or None when missing)."""
    value = row.get(cols.options)
    field = cols.options
    if value is not None:
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except json.JSONDecodeError as exc:
                raise ctx.error(cols.options, f"expected a list or a JSON list string: {exc}") from exc
        if not isinstance(value, (list, tuple)):
            raise ctx.error(cols.options, f"expected a list of strings, got {value!r}")
        slots = list(value)
    else:
        if not any(c in row for c in cols.option_columns):
            raise ctx.error(cols.options, f"missing (and no option columns {list(cols.option_columns)})")
        slots = [row.get(c) for c in cols.option_columns]
        field = "/".join(cols.option_columns)
    kept = [i for i, o in enumerate(slots) if not missing_cell(o)]
    options = option_list([slots[i] for i in kept], field, ctx)
    return options, [kept.index(i) if i in kept else None for i in range(len(slots))]


def _answer(value: Any, options: list[str], slots: list[int | None], cols: SpatialabColumns,
            ctx: RecordContext) -> str:
    """Letter of the answer among the kept options. Two readings: by position (a published letter
    or, with ``answer_index_base``, an option number, mapped through ``slots``) and as an
    option's text; one that names an option is the answer; two that name different ones are
    settled by ``ambiguous_answer`` (`AmbiguousAnswer` for "skip")."""
    field = cols.answer
    if value is None:
        raise ctx.error(field, "missing")
    text = value.strip() if isinstance(value, str) else None
    is_index = (
        (isinstance(value, int) and not isinstance(value, bool))
        or (isinstance(value, float) and value.is_integer())
        or (text is not None and text.isdigit())
    )
    # a number cell is also a text: 3, 3.0 and "3" all read as the option "3"
    as_text = text if text is not None else str(int(value)) if is_index else None
    by_text = LETTERS[options.index(as_text)] if as_text in options else None
    try:
        by_position = _by_position(value, text, is_index, slots, cols, ctx)
    except DataFormatError:
        if by_text is None:
            raise
        return by_text  # the position names no option: the text is the only reading
    if by_position is None and by_text is None:
        hint = " (set answer_index_base to 0 or 1 to accept indices)" if is_index else ""
        raise ctx.error(field, f"expected an option letter, number or an option's text, got {value!r}{hint}")
    if by_position is None or by_text is None or by_position == by_text:
        return by_position or by_text
    if cols.ambiguous_answer != "skip":
        return by_position if cols.ambiguous_answer == "index" else by_text
    kind = "option letter" if parse_letter(text) is not None else f"option number ({cols.answer_index_base}-based)"
    raise AmbiguousAnswer(
        ctx.file, f"the answer {value!r} read as an {kind} is option {by_position} "
        f"({options[LETTERS.index(by_position)]!r}), read as an option's text option {by_text}: the gold "
        f"letter would be a guess (SpatialabColumns(ambiguous_answer='index' or 'text') says which reading "
        f"the release uses)", index=ctx.index, record_id=ctx.record_id, field=field)


def _by_position(value: Any, text: str | None, is_index: bool, slots: list[int | None], cols: SpatialabColumns,
                 ctx: RecordContext) -> str | None:
    """The letter ``value`` names as a letter or an option number, None when it is neither; a
    DataFormatError when it names no kept option."""
    field = cols.answer
    if parse_letter(text) is not None:  # "B", "b", "B.", "(B)", "Option B"
        slot = LETTERS.index(answer_from_letter(text, len(slots), field, ctx))
    elif is_index and cols.answer_index_base is not None:
        slot = LETTERS.index(answer_from_index(value, len(slots), field, ctx, base=cols.answer_index_base))
    else:
        return None
    if slots[slot] is None:
        raise ctx.error(field, f"answer {value!r} points at a missing option")
    return LETTERS[slots[slot]]


def _images(value: Any, field: str, ctx: RecordContext, check_images: bool) -> list[ImageRef]:
    return image_refs(value, [ctx.file.parent], field, ctx, check_images)
