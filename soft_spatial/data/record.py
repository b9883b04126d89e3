"""`QuestionRecord`: one multiple-choice question, the same shape for every benchmark."""

from __future__ import annotations

import string
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from PIL import Image

#: Option letters in order; option i is shown as LETTERS[i].
LETTERS = string.ascii_uppercase

ImageRef = Path | Image.Image
"""An image as a loader hands it out: a file path, or a decoded image for embedded bytes."""


def option_letters(n: int) -> list[str]:
    """The letters that label ``n`` options: ``option_letters(3) == ["A", "B", "C"]``."""
    if not 0 <= n <= len(LETTERS):
        raise ValueError(f"cannot label {n} options with single letters")
    return list(LETTERS[:n])


def letter_to_index(letter: str) -> int:
    """0-based option index of a letter ("A" -> 0); lower case is accepted."""
    if not isinstance(letter, str) or len(letter.strip()) != 1 or not letter.strip().isalpha():
        raise ValueError(f"not an option letter: {letter!r}")
    return LETTERS.index(letter.strip().upper())


def index_to_letter(index: int) -> str:
    """Letter of a 0-based option index (0 -> "A")."""
    if not 0 <= index < len(LETTERS):
        raise ValueError(f"option index out of range: {index}")
    return LETTERS[index]


@dataclass
class QuestionRecord:
    """One benchmark question, normalised across OmniSpatial, SpatiaLab and MindCube.

    Attributes:
        id: the benchmark's own id (not necessarily unique across task types in OmniSpatial).
        images: the images in the order the question refers to them (MindCube: view 1, 2, ...).
        question: the question text exactly as stored. For MindCube it still contains the options
            ("... A. left B. right"); ``options_inline`` is then True.
        options: option texts; option i is labelled ``LETTERS[i]``.
        answer: the correct letter, upper case.
        benchmark: source benchmark name ("omnispatial", "spatialab", "mindcube").
        category: top-level group used for per-group accuracy: OmniSpatial ``task_type``,
            SpatiaLab category, MindCube setting (among / around / rotation / translation).
        subcategory: second-level group: OmniSpatial ``sub_task_type``, SpatiaLab subcategory,
            None for MindCube.
        options_inline: True when ``question`` already lists the options (MindCube).
        meta: opaque passthrough fields of the source record (e.g. MindCube ``type``).
    """

    id: str
    images: list[ImageRef]
    question: str
    options: list[str]
    answer: str
    benchmark: str
    category: str
    subcategory: str | None = None
    options_inline: bool = False
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # the answer is compared to extracted letters as is: "A." or "1" would score every response 0
        if not isinstance(self.answer, str) or self.answer not in LETTERS[: len(self.options)]:
            raise ValueError(f"{self.benchmark} record {self.id!r}: answer {self.answer!r} is not one of "
                             f"its option letters {LETTERS[: len(self.options)]!r}")

    @property
    def key(self) -> str:
        """The record's identity within its benchmark split: the id, qualified by the task type
        for OmniSpatial (whose ids restart in every task type). Loaders reject duplicate keys;
        evaluation rows are keyed on it, never on a record's position."""
        return f"{self.category}/{self.id}" if self.benchmark == "omnispatial" else self.id

    @property
    def letters(self) -> list[str]:
        """The option letters of this question, e.g. ["A", "B", "C"]."""
        return option_letters(len(self.options))

    @property
    def answer_index(self) -> int:
        """0-based index of the correct option."""
        return letter_to_index(self.answer)

    @property
    def answer_text(self) -> str:
        """Text of the correct option."""
        return self.options[self.answer_index]

    def option_text(self, letter: str) -> str:
        """Text of the option labelled ``letter`` (case-insensitive); KeyError if there is none."""
        try:
            index = letter_to_index(letter)
        except ValueError as exc:
            raise KeyError(letter) from exc
        if index >= len(self.options):
            raise KeyError(letter)
        return self.options[index]

    @property
    def task_type(self) -> str:
        """OmniSpatial's name for ``category``."""
        return self.category

    @property
    def sub_task_type(self) -> str | None:
        """OmniSpatial's name for ``subcategory``."""
        return self.subcategory
