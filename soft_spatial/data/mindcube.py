"""MindCube loader: raw JSONL (``raw/MindCube_<split>.jsonl``), 2-4 views per question.

Options are written inside the question ("... A. left B. right"); they are parsed into
``options`` while ``question`` keeps the original text (``options_inline=True``).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from soft_spatial.data.checks import (RecordContext, answer_from_letter, inside, check_records, option_list, require,
                                      text_field, verified_image)
from soft_spatial.data.record import LETTERS, ImageRef, QuestionRecord
from soft_spatial.data.tables import read_table

NAME = "mindcube"

#: split name -> file under ``raw/``. tinybench (1,050 Qs) is the evaluation set.
SPLIT_FILES = {
    "tinybench": "MindCube_tinybench.jsonl",
    "train": "MindCube_train.jsonl",
    "full": "MindCube.jsonl",
}

#: id prefix -> setting. ``aroundnew`` items belong to ``around``.
SETTINGS = {
    "among": "among",
    "around": "around",
    "aroundnew": "around",
    "rotation": "rotation",
    "translation": "translation",
}

#: the image placeholder and the question header of MindCube's full prompts (``templates.py``)
IMAGE_MARKER = "<image>"
QUESTION_HEADER = "[Question]"

#: settings left out of the official overall accuracy.
EXCLUDED_FROM_OVERALL = ("translation",)

# an option marker "X. " at the start of the text or after whitespace
_OPTION_MARK = re.compile(r"(?:^|(?<=\s))([A-Z])\.\s")


def setting_from_id(record_id: str) -> str | None:
    """``among`` / ``around`` / ``rotation`` / ``translation`` from the id prefix, or None."""
    return SETTINGS.get(record_id.split("_", 1)[0].lower())


def split_inline_options(question: str) -> tuple[str, list[str]]:
    """Split "stem A. x B. y" into ("stem", ["x", "y"]).

    The options are the last run of consecutive markers A., B., C., ... in the text; each option
    runs to the next marker (the last one to the end). Returns ("question", []) when there is no
    run of at least two markers.
    """
    marks = [(m.group(1), m.start(), m.end()) for m in _OPTION_MARK.finditer(question)]
    for first in reversed([i for i, mark in enumerate(marks) if mark[0] == "A"]):
        run = [marks[first]]
        for mark in marks[first + 1 :]:
            if mark[0] == LETTERS[len(run)]:
                run.append(mark)
        if len(run) >= 2:
            ends = [start for _, start, _ in run[1:]] + [len(question)]
            options = [question[end:stop].strip() for (_, _, end), stop in zip(run, ends)]
            return question[: run[0][1]].strip(), options
    return question, []


def find_jsonl(root: str | Path, split: str = "tinybench") -> tuple[Path, Path]:
    """(JSONL file, image root). ``root`` is the unzipped ``data/`` directory or a JSONL file.

    Image paths in the records are relative to ``data/``: for a file inside ``raw/`` that is the
    parent of ``raw/``, otherwise the file's own directory.
    """
    root = Path(root)
    if root.is_file():
        base = root.parent.parent if root.parent.name == "raw" else root.parent
        return root, base
    if split not in SPLIT_FILES:
        raise ValueError(f"unknown MindCube split {split!r}; expected one of {sorted(SPLIT_FILES)}")
    for path in (root / "raw" / SPLIT_FILES[split], root / SPLIT_FILES[split]):
        if path.is_file():
            return path, root
    raise FileNotFoundError(f"MindCube {split!r} split not found under {root} (expected raw/{SPLIT_FILES[split]})")


def load_mindcube(
    root: str | Path, split: str = "tinybench", *, image_root: str | Path | None = None, check_images: bool = True
) -> list[QuestionRecord]:
    """Load MindCube raw-QA records; views keep their list order (never sorted)."""
    path, base = find_jsonl(root, split)
    base = Path(image_root) if image_root is not None else base
    rows = read_table(path)
    return check_records([_parse(row, RecordContext(path, i, benchmark=NAME), base, check_images)
                          for i, row in enumerate(rows)], path)


def _parse(raw: dict[str, Any], ctx: RecordContext, base: Path, check_images: bool) -> QuestionRecord:
    record_id = text_field(raw, "id", ctx)
    ctx = ctx.with_id(record_id)
    images = require(raw, "images", ctx)
    if not isinstance(images, list) or not images or not all(isinstance(p, str) and p for p in images):
        raise ctx.error("images", f"expected a non-empty list of image paths, got {images!r}")
    paths = [inside(base, p, "images", ctx) for p in images]
    if check_images:
        paths = [verified_image(p, "images", ctx) for p in paths]
    meta = {k: raw[k] for k in ("category", "type", "meta_info") if k in raw}
    return mindcube_record(record_id, text_field(raw, "question", ctx), "question", paths,
                           require(raw, "gt_answer", ctx), "gt_answer", ctx, meta)


def question_from_prompt(prompt: str) -> str:
    """The raw question inside a full MindCube prompt: ``<image>`` markers removed, and only the
    text after the last ``[Question]`` header when there is one (VAGEN's ``question_str``,
    lmms-eval's and VLMEvalKit's ``input_prompt``: markers, instruction, header, question)."""
    text = prompt.replace(IMAGE_MARKER, "")
    if QUESTION_HEADER in text:
        text = text.rsplit(QUESTION_HEADER, 1)[1]
    return text.strip()


def mindcube_record(
    record_id: str,
    question: str,
    question_field: str,
    images: list[ImageRef],
    answer: Any,
    answer_field: str,
    ctx: RecordContext,
    meta: dict[str, Any] | None = None,
    setting: str | None = None,
) -> QuestionRecord:
    """A MindCube record from its parts, checked: setting from the id prefix (or ``setting``),
    2-5 inline options, a letter answer among them, at least one image."""
    derived = setting_from_id(record_id)
    setting = SETTINGS.get(setting, setting) if setting else derived
    if setting not in SETTINGS.values():
        prefix = record_id.split("_", 1)[0]
        raise ctx.error("id", f"unknown setting (id prefix {prefix!r}); expected one of {sorted(SETTINGS)}")
    _, options = split_inline_options(question)
    if not options:
        raise ctx.error(question_field, "no inline options ('A. ... B. ...') found")
    options = option_list(options, question_field, ctx, min_n=2, max_n=5)
    if not images:
        raise ctx.error("images", "no images")
    return QuestionRecord(
        id=record_id,
        images=list(images),
        question=question,
        options=options,
        answer=answer_from_letter(answer, len(options), answer_field, ctx),
        benchmark=NAME,
        category=setting,
        subcategory=None,
        options_inline=True,
        meta=meta or {},
    )
