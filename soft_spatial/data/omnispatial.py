"""OmniSpatial loader: ``data.json`` plus ``<task_type>/<image_no>.png`` (test and train releases)."""

from __future__ import annotations

from pathlib import Path

from soft_spatial.data.checks import (RecordContext, answer_from_index, check_records, inside, option_list,
                                      require, text_field, verified_image)
from soft_spatial.data.record import ImageRef, QuestionRecord
from soft_spatial.data.tables import read_table

NAME = "omnispatial"

#: task_type -> its sub_task_types, exactly as spelled in ``data.json``.
TAXONOMY: dict[str, tuple[str, ...]] = {
    "Dynamic_Reasoning": ("Manipulation", "Motion_Analysis"),
    "Spatial_Interaction": ("Traffic_Analysis", "Localization", "Geospatial_Strategy"),
    "Complex_Logic": ("Pattern_Recognition", "Geometric_Reasoning"),
    "Perspective_Taking": ("Egocentric", "Allocentric", "Hypothetical"),
}

SPLITS = ("test", "train", "full")


def find_release(root: str | Path, split: str = "test") -> Path:
    """The directory holding ``data.json``.

    ``root`` may be the release directory itself (what ``OmniSpatial-<split>.zip`` unpacks to) or a
    directory containing ``OmniSpatial-<split>/`` or ``<split>/``.
    """
    root = Path(root)
    candidates = [root, root / f"OmniSpatial-{split}", root / split]
    for directory in candidates:
        if (directory / "data.json").is_file():
            return directory
    tried = ", ".join(str(d / "data.json") for d in candidates)
    raise FileNotFoundError(f"OmniSpatial {split!r} split not found; tried {tried}")


def load_omnispatial(root: str | Path, split: str = "test", *, check_images: bool = True) -> list[QuestionRecord]:
    """Load an OmniSpatial release into records (one image each, answers as letters).

    Raises `DataFormatError` for a record with an unknown task or sub-task, 2-4 options violated,
    an answer index out of range, or a missing image.
    """
    release = find_release(root, split)
    path = release / "data.json"
    raw_records = read_table(path)
    records = [_parse(raw, RecordContext(path, i, benchmark=NAME), release, check_images)
               for i, raw in enumerate(raw_records)]
    return check_records(records, path)


def _parse(raw: dict, ctx: RecordContext, release: Path, check_images: bool) -> QuestionRecord:
    record_id = require(raw, "id", ctx)
    if not isinstance(record_id, str) or not record_id.split("_")[0]:
        raise ctx.error("id", f"expected '<image_no>_<question_no>', got {record_id!r}")
    ctx = ctx.with_id(record_id)
    task_type, sub_task_type = task_types(raw, ctx)
    options = option_list(require(raw, "options", ctx), "options", ctx)
    answer = answer_from_index(require(raw, "answer", ctx), len(options), "answer", ctx)
    image = inside(release, Path(task_type) / f"{record_id.split('_')[0]}.png", "id", ctx)
    if check_images:
        verified_image(image, "image", ctx)
    return omnispatial_record(record_id, [image], text_field(raw, "question", ctx), options, answer,
                              task_type, sub_task_type)


def task_types(raw: dict, ctx: RecordContext) -> tuple[str, str]:
    """(task_type, sub_task_type) of a record, checked against `TAXONOMY`."""
    task_type = text_field(raw, "task_type", ctx)
    if task_type not in TAXONOMY:
        raise ctx.error("task_type", f"unknown task_type {task_type!r}; expected one of {sorted(TAXONOMY)}")
    sub_task_type = text_field(raw, "sub_task_type", ctx)
    if sub_task_type not in TAXONOMY[task_type]:
        raise ctx.error(
            "sub_task_type",
            f"unknown sub_task_type {sub_task_type!r} for {task_type}; expected one of {list(TAXONOMY[task_type])}",
        )
    return task_type, sub_task_type


def omnispatial_record(record_id: str, images: list[ImageRef], question: str, options: list[str], answer: str,
                       task_type: str, sub_task_type: str) -> QuestionRecord:
    """An OmniSpatial record from checked parts (the one place the record shape is chosen)."""
    return QuestionRecord(
        id=record_id,
        images=images,
        question=question,
        options=options,
        answer=answer,
        benchmark=NAME,
        category=task_type,
        subcategory=sub_task_type,
    )
