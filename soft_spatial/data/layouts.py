"""The benchmark layouts people download, recognised from the files themselves.

Each `Layout` names one published file layout, the source its schema was read from, and how
sure that reading is (``seen``: a real record was read; ``code``: only the harness code that reads
it; ``doc``: only a paper or card). `detect` reads a path (a file, a release directory, a Hugging
Face snapshot, a VLMEvalKit data folder), finds the table for the split and picks the layout by
its columns; `load` turns it into `QuestionRecord`s with the same fields the original loaders give.

=========================  ========  ===============================================================
layout                     evidence  schema read from
=========================  ========  ===============================================================
omnispatial-release        seen      qizekun/OmniSpatial README.md l.131-140, api_eval.py l.19-49
omnispatial-lmms-eval      code      EvolvingLMMs-Lab/lmms-eval lmms_eval/tasks/omnispatial/utils.py
                                     (``doc["gt"]`` letter, ``doc["image_path"]`` under the snapshot)
omnispatial-vlmevalkit     code      open-compass/VLMEvalKit vlmeval/dataset/omnispatialbench.py
                                     (option columns A..D, ``image_path`` under OmniSpatial-test/)
                                     and image_base.py (base64 ``image``, index references)
mindcube-raw               seen      MindCube raw JSONL (third-party copy of a record; field use in
                                     mll-lab-nu/MindCube src/evaluation/evaluator.py)
mindcube-vagen             seen      mll-lab-nu/VAGEN (MindCube branch) vagen/env/crossview/
                                     MindCube_RL_Data/crossviewQA_tinybench_baseRL.jsonl
mindcube-lmms-eval         code      EvolvingLMMs-Lab/lmms-eval lmms_eval/tasks/mindcube/utils.py
                                     (``input_prompt``, ``images`` as HF images, ``gt_answer``)
mindcube-vlmevalkit        code      open-compass/VLMEvalKit vlmeval/dataset/mindcubebench.py
                                     (``input_prompt``, ``image_path`` under MindCube data/,
                                     ``answer``, ``category``)
spatialab                  doc       no public schema: 1-based option numbers and ``nan`` options
                                     from the SpatiaLab paper (App. J); columns by
                                     `SpatialabColumns`
=========================  ========  ===============================================================

Unverified details (no real file was read): the file names inside the lmms-eval snapshots
(``oscarqjh/MindCube_lmmseval``, ``pangyyyyy/OmniSpatial``), whether the lmms-eval MindCube
``input_prompt`` carries the ``[Question]`` header (the question is taken after the last header
when there is one, else the whole prompt without ``<image>`` markers), whether VLMEvalKit's
OmniSpatial TSV has an ``id`` column (its ``index`` is used otherwise), and every SpatiaLab column name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from collections.abc import Callable, Sequence

from soft_spatial.data import mindcube, omnispatial, spatialab
from soft_spatial.data.checks import (RecordContext, answer_from_letter, check_records, missing_cell,
                                      option_list, require, text_field)
from soft_spatial.data.errors import DataFormatError
from soft_spatial.data.image_refs import image_refs
from soft_spatial.data.record import LETTERS, QuestionRecord
from soft_spatial.data.tables import SHARD, TABLE_SUFFIXES, check_shards, read_table, shard_set

Row = dict[str, Any]


@dataclass(frozen=True)
class Source:
    """Where a table's rows come from and where its relative image paths may live."""

    file: Path
    image_bases: tuple[Path, ...]
    check_images: bool = True


@dataclass(frozen=True)
class Layout:
    """One published layout: recognised by `matches` on a row, parsed by `parse` (None: the
    benchmark's own loader reads it, see `load`)."""

    name: str
    benchmark: str
    evidence: str
    source: str
    matches: Callable[[Row], bool]
    parse: Callable[[Row, RecordContext, Source], QuestionRecord] | None
    #: sub-directories of a base directory where its relative image paths start
    image_subdirs: tuple[str, ...] = ()


# --- parsers of the harness layouts ----------------------------------------------------------------


def _has(row: Row, *keys: str) -> bool:
    return all(k in row for k in keys)


def _record_id(row: Row, ctx: RecordContext, *keys: str) -> tuple[str, RecordContext]:
    for key in keys:
        if row.get(key) is not None and str(row[key]).strip():
            record_id = str(row[key]).strip()
            return record_id, ctx.with_id(record_id)
    raise ctx.error(keys[0], "missing")


def _images(row: Row, ctx: RecordContext, src: Source, *keys: str) -> list:
    """Images from the first of ``keys`` present in the row."""
    key = next((k for k in keys if row.get(k) is not None), keys[0])
    return image_refs(row.get(key), src.image_bases, key, ctx, src.check_images)


def _omnispatial_lmms_eval(row: Row, ctx: RecordContext, src: Source) -> QuestionRecord:
    record_id, ctx = _record_id(row, ctx, "id")
    task, sub = omnispatial.task_types(row, ctx)
    options = option_list(require(row, "options", ctx), "options", ctx)
    answer = answer_from_letter(require(row, "gt", ctx), len(options), "gt", ctx)
    images = _images(row, ctx, src, "image_path")
    return omnispatial.omnispatial_record(record_id, images, text_field(row, "question", ctx), options, answer,
                                          task, sub)


def _letter_columns(row: Row) -> list[str]:
    """Option columns A, B, C, ... in order, stopping at the first absent one."""
    columns = []
    for letter in LETTERS:
        if letter not in row:
            break
        columns.append(letter)
    return columns


def _omnispatial_vlmevalkit(row: Row, ctx: RecordContext, src: Source) -> QuestionRecord:
    record_id, ctx = _record_id(row, ctx, "id", "index")
    task, sub = omnispatial.task_types(row, ctx)
    columns = _letter_columns(row)
    present = [c for c in columns if not missing_cell(row[c])]
    if present != columns[: len(present)]:  # a gap would shift the letters
        raise ctx.error("/".join(columns), f"option columns must be filled from A on, got {present}")
    options = option_list([str(row[c]) for c in present], "/".join(columns), ctx)
    answer = answer_from_letter(require(row, "answer", ctx), len(options), "answer", ctx)
    images = _images(row, ctx, src, "image", "image_path")
    return omnispatial.omnispatial_record(record_id, images, text_field(row, "question", ctx), options, answer,
                                          task, sub)


def _mindcube_vagen(row: Row, ctx: RecordContext, src: Source) -> QuestionRecord:
    record_id, ctx = _record_id(row, ctx, "id")
    question = mindcube.question_from_prompt(text_field(row, "question_str", ctx))
    images = _images(row, ctx, src, "images")
    return mindcube.mindcube_record(record_id, question, "question_str", images, require(row, "gt_answer", ctx),
                                    "gt_answer", ctx, setting=row.get("setting_tag"))


def _mindcube_lmms_eval(row: Row, ctx: RecordContext, src: Source) -> QuestionRecord:
    record_id, ctx = _record_id(row, ctx, "id")
    field = "question" if row.get("question") else "input_prompt"
    question = mindcube.question_from_prompt(text_field(row, field, ctx))
    images = _images(row, ctx, src, "images")
    return mindcube.mindcube_record(record_id, question, field, images, require(row, "gt_answer", ctx),
                                    "gt_answer", ctx)


def _mindcube_vlmevalkit(row: Row, ctx: RecordContext, src: Source) -> QuestionRecord:
    record_id, ctx = _record_id(row, ctx, "id", "index")
    question = mindcube.question_from_prompt(text_field(row, "input_prompt", ctx))
    images = _images(row, ctx, src, "image", "image_path")
    setting = row.get("category") if mindcube.setting_from_id(record_id) is None else None
    return mindcube.mindcube_record(record_id, question, "input_prompt", images, require(row, "answer", ctx),
                                    "answer", ctx, setting=setting)


def _is_spatialab(row: Row) -> bool:
    value = row.get(spatialab.SpatialabColumns().category)
    return isinstance(value, str) and spatialab.canonical_category(value) is not None


LAYOUTS: tuple[Layout, ...] = (
    Layout("omnispatial-lmms-eval", "omnispatial", "code",
           "EvolvingLMMs-Lab/lmms-eval: lmms_eval/tasks/omnispatial/utils.py",
           lambda r: _has(r, "question", "options", "gt", "task_type", "sub_task_type"), _omnispatial_lmms_eval),
    Layout("omnispatial-vlmevalkit", "omnispatial", "code",
           "open-compass/VLMEvalKit: vlmeval/dataset/omnispatialbench.py, image_base.py",
           lambda r: _has(r, "question", "A", "B", "answer", "task_type", "sub_task_type"), _omnispatial_vlmevalkit,
           image_subdirs=("OmniSpatial-test",)),
    Layout("omnispatial-release", "omnispatial", "seen", "qizekun/OmniSpatial: README.md, api_eval.py",
           lambda r: _has(r, "id", "question", "options", "answer", "task_type", "sub_task_type"), None),
    Layout("mindcube-lmms-eval", "mindcube", "code", "EvolvingLMMs-Lab/lmms-eval: lmms_eval/tasks/mindcube/utils.py",
           lambda r: _has(r, "id", "input_prompt", "images", "gt_answer"), _mindcube_lmms_eval),
    Layout("mindcube-vlmevalkit", "mindcube", "code", "open-compass/VLMEvalKit: vlmeval/dataset/mindcubebench.py",
           lambda r: _has(r, "input_prompt", "answer") and ("image" in r or "image_path" in r),
           _mindcube_vlmevalkit, image_subdirs=("data",)),
    Layout("mindcube-vagen", "mindcube", "seen",
           "mll-lab-nu/VAGEN (MindCube branch): vagen/env/crossview/MindCube_RL_Data/*_baseRL.jsonl",
           lambda r: _has(r, "id", "question_str", "images", "gt_answer"), _mindcube_vagen, image_subdirs=("data",)),
    Layout("mindcube-raw", "mindcube", "seen", "MLL-Lab/MindCube data/raw/*.jsonl; mll-lab-nu/MindCube evaluator.py",
           lambda r: _has(r, "id", "question", "images", "gt_answer"), None),
    Layout("spatialab", "spatialab", "doc", "SpatiaLab paper App. J (no public schema; see SpatialabColumns)",
           _is_spatialab, None),
)

BY_NAME = {layout.name: layout for layout in LAYOUTS}


# --- finding the table -----------------------------------------------------------------------------

#: split name -> token sets tried in order against a file's path (first set naming one table wins)
SPLIT_ALIASES: dict[str, tuple[tuple[str, ...], ...]] = {
    "tinybench": (("tinybench",), ("tiny", "combined"), ("tiny",)),
    "full": (("full", "combined"), ("full",)),
}


def _tokens(path: Path, root: Path) -> set[str]:
    rel = path.relative_to(root) if path.is_relative_to(root) else Path(path.name)
    text = "/".join(rel.parts[:-1] + (SHARD.sub("", rel.stem),)).lower()
    return {t for t in re.split(r"[^a-z0-9]+", text) if t}


def _table_files(root: Path) -> list[Path]:
    """Table files under ``root`` (recursively, skipping hidden directories such as ``.cache``)."""
    return sorted(
        p for p in root.rglob("*")
        if p.is_file() and p.suffix.lower() in TABLE_SUFFIXES
        and not any(part.startswith(".") for part in p.relative_to(root).parts)
    )


def _groups(files: Sequence[Path]) -> list[list[Path]]:
    """Files grouped by table: the shards ``x-00000-of-00002.parquet`` ... form one group."""
    groups: dict[tuple[Path, str], list[Path]] = {}
    for f in files:
        groups.setdefault((f.parent, SHARD.sub("", f.stem)), []).append(f)
    return list(groups.values())


def find_tables(root: Path, split: str | None) -> list[Path]:
    """The table (one file, or the shards of one) in directory ``root`` for ``split``; a sharded
    table only whole (`check_shards`: a missing shard is an error naming it)."""
    groups = _groups(_table_files(root))
    if not groups:
        raise FileNotFoundError(f"no data table ({', '.join(TABLE_SUFFIXES)}) under {root}")
    if len(groups) == 1:
        return check_shards(groups[0])
    if split:
        for tokens in SPLIT_ALIASES.get(split, ()) + ((split.lower(),),):
            hits = [g for g in groups if set(tokens) <= _tokens(g[0], root)]
            if len(hits) == 1:
                return check_shards(hits[0])
    names = ", ".join(str(g[0].relative_to(root)) for g in groups)
    raise FileNotFoundError(
        f"cannot choose the table for split {split!r} under {root}; found: {names}. Pass the file as the root "
        f"or a split that names it."
    )


@dataclass(frozen=True)
class Detected:
    """What `detect` found: the layout and the table file(s)."""

    layout: Layout
    files: tuple[Path, ...]
    rows: tuple[Row, ...]


def _release_table(root: Path, benchmark: str | None, split: str | None) -> tuple[str, list[Path]] | None:
    """The benchmark's own release layout inside directory ``root``, if it is one."""
    if benchmark in (None, "omnispatial"):
        try:
            return "omnispatial-release", [omnispatial.find_release(root, split or "test") / "data.json"]
        except FileNotFoundError:
            pass
    if benchmark in (None, "mindcube"):
        try:
            return "mindcube-raw", [mindcube.find_jsonl(root, split or "tinybench")[0]]
        except FileNotFoundError:
            pass
        except ValueError:  # an unknown split of a raw release
            if (root / "raw").is_dir():
                raise
    return None


def detect(root: str | Path, benchmark: str | None = None, split: str | None = None) -> Detected:
    """The layout of ``root`` (a file or a directory), checked against ``benchmark`` when given."""
    root = Path(root)
    if not root.exists():
        raise FileNotFoundError(f"benchmark data not found: {root}")
    release = _release_table(root, benchmark, split) if root.is_dir() else None
    if release is not None:
        layout, files = BY_NAME[release[0]], release[1]
    elif benchmark == "spatialab":  # no published layout to recognise: the column mapping decides
        files = [spatialab.find_table(root, split)]
        layout = BY_NAME["spatialab"]
    else:
        files = shard_set(root) if root.is_file() else find_tables(root, split)  # a shard: its whole set
        layout = None
    rows = [row for f in files for row in read_table(f)]
    if layout is None:
        layout = _match(rows, files[0], benchmark)
    elif not rows:
        raise DataFormatError(files[0], "no records")
    if benchmark is not None and layout.benchmark != benchmark:
        raise DataFormatError(files[0], f"holds {layout.benchmark} data (layout {layout.name}), not {benchmark}")
    return Detected(layout, tuple(files), tuple(rows))


def _match(rows: Sequence[Row], file: Path, benchmark: str | None) -> Layout:
    if not rows:
        raise DataFormatError(file, "no records")
    first = rows[0]
    if not isinstance(first, dict):
        raise DataFormatError(file, f"expected records (objects), got {type(first).__name__}", index=0)
    # every layout is tried, so a file of another benchmark is named as such by `detect`
    for layout in LAYOUTS:
        if layout.matches(first):
            return layout
    known = "; ".join(lay.name for lay in LAYOUTS if benchmark in (None, lay.benchmark))
    raise DataFormatError(file, f"columns {sorted(first)} match no known layout ({known})", index=0)


def image_bases(files: Sequence[Path], root: Path, layout: Layout, image_root: str | Path | None) -> tuple[Path, ...]:
    """Directories a relative image path may start from, most specific first: ``image_root``,
    the root directory, the table's directory and up to three of its parents (a snapshot nests
    its tables in ``data/`` or config folders), each with the layout's image sub-directories."""
    dirs: list[Path] = [Path(image_root)] if image_root is not None else []
    if root.is_dir():
        dirs.append(root)
    table_dir = files[0].parent
    dirs += [table_dir, *list(table_dir.parents)[:3]]
    out: list[Path] = []
    for d in dirs:
        for candidate in (d, *(d / s for s in layout.image_subdirs)):
            if candidate not in out:
                out.append(candidate)
    return tuple(out)


def _resolve_index_images(rows: Sequence[Row]) -> list[Row]:
    """VLMEvalKit's ``image`` cell may name another row's ``index`` instead of holding base64
    (``image_base.py``: a value of at most 64 characters is such a reference)."""
    if not rows or "image" not in rows[0] or "index" not in rows[0]:
        return list(rows)
    by_index = {str(r.get("index")): r.get("image") for r in rows}
    out = []
    for r in rows:
        image = r.get("image")
        if isinstance(image, str) and len(image) <= 64 and image in by_index:
            r = {**r, "image": by_index[image]}
        out.append(r)
    return out


def load(
    root: str | Path,
    benchmark: str | None = None,
    split: str | None = None,
    *,
    image_root: str | Path | None = None,
    check_images: bool = True,
    **kwargs: Any,
) -> list[QuestionRecord]:
    """Records of ``root`` in whatever published layout it is (see `detect`).

    ``image_root`` is where relative image paths start when the table is kept apart from the
    images (e.g. a VAGEN JSONL beside a MindCube ``data/`` directory); ``kwargs`` go to the
    SpatiaLab loader (``columns=``, ``strict_categories=``).
    """
    root = Path(root)
    found = detect(root, benchmark, split)
    layout, file = found.layout, found.files[0]
    if layout.name == "omnispatial-release":
        return omnispatial.load_omnispatial(file.parent, check_images=check_images)
    if layout.name == "mindcube-raw":
        return mindcube.load_mindcube(file, image_root=image_root, check_images=check_images)
    if layout.name == "spatialab":
        return spatialab.load_spatialab(file, check_images=check_images, **kwargs)
    if kwargs:
        raise TypeError(f"unexpected arguments for layout {layout.name}: {sorted(kwargs)}")
    src = Source(file, image_bases(found.files, root, layout, image_root), check_images)
    rows = _resolve_index_images(found.rows)
    return check_records([layout.parse(row, RecordContext(file, i, benchmark=layout.benchmark), src)
                          for i, row in enumerate(rows)], file)
