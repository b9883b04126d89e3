"""Gold answers: the letter a ground truth names, read only where that is unambiguous.

A gold answer scores every response of its question, so one that cannot be read must stop the
run, never score 0 in silence. `gold_letter` accepts an option letter in any of the forms people
write one ("B", " b ", "B.", "(B)", "B)", "[B]", "Option B", full-width "Ｂ") or an option's own
text, and refuses everything else with a ValueError naming the value: a number (0- or 1-based?
only the benchmark's schema knows: the loaders convert indexes with it, see
`soft_spatial.data.checks.answer_from_index`), a hedge ("B or C"), a letter with no option.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Mapping, Sequence
from typing import Any

from soft_spatial.data.record import LETTERS

#: letters a parse allows when a question's options are unknown (`extract.parse_choice`'s default)
DEFAULT_LETTERS = "ABCD"
# "B", "b", "B.", "(B)", "B)", "[B]", "Option B", "option: b", "Answer: (B)"
_LETTER_FORMS = re.compile(r"(?:(?:option|choice|answer)\s*:?\s*)?(?:\(\s*([a-z])\s*\)|\[\s*([a-z])\s*\]|([a-z])\s*\)?)"
                           r"\s*[.:]?", re.IGNORECASE)


def parse_letter(value: Any) -> str | None:
    """The upper-case letter a gold answer written as a letter names, or None (not a letter form)."""
    if not isinstance(value, str):
        return None
    m = _LETTER_FORMS.fullmatch(unicodedata.normalize("NFKC", value).strip())
    return next(g for g in m.groups() if g).upper() if m else None


_SPACES = re.compile(r"\s+")


def normalise_option_text(text: str) -> str:
    """Lower case, single spaces, no surrounding quotes/asterisks, no trailing period."""
    text = _SPACES.sub(" ", text.strip().lower())
    text = text.strip("*\"'`“”‘’ ")
    return text.rstrip(". ").strip()


def gold_letter(value: Any, options: Sequence[str] | None = None) -> str:
    """The gold letter of ``value``: a letter form (`parse_letter`) that labels one of ``options``
    (A-D without options), else the letter of the option whose text equals ``value``; otherwise a
    ValueError naming the value and what is accepted."""
    if value is None:
        raise ValueError("gold answer missing (None)")
    allowed = LETTERS[: len(options)] if options else DEFAULT_LETTERS
    letter = parse_letter(value)
    if letter is not None and letter in allowed:
        return letter
    if isinstance(value, str) and options:
        wanted = normalise_option_text(value)
        for i, option in enumerate(options):
            if normalise_option_text(str(option)) == wanted:
                return LETTERS[i]
    if letter is not None:
        raise ValueError(f"gold answer {value!r} names option {letter}, but the question's "
                         f"letters are {allowed}")
    number = isinstance(value, (int, float)) or (isinstance(value, str) and value.strip().isdigit())
    why = (" (a number: whether it counts from 0 or 1 only the benchmark's schema says, so the "
           "loaders convert indexes to letters)" if number else "")
    texts = " or one of the option texts" if options else " (no options given, so no option text either)"
    raise ValueError(f"gold answer {value!r} is not an option letter ('B', 'b', 'B.', '(B)', "
                     f"'B)', 'Option B'){texts}{why}")


def options_from_extra_info(extra_info: Mapping[str, Any] | None) -> list[str] | None:
    """``extra_info["options"]`` as a list of strings; it may be a list, tuple, array or JSON string."""
    if not extra_info:
        return None
    options = extra_info.get("options")
    if options is None:
        return None
    if isinstance(options, str):
        try:
            options = json.loads(options)
        except json.JSONDecodeError:
            return None
    if hasattr(options, "tolist"):  # numpy arrays from verl's non-tensor batch
        options = options.tolist()
    if not isinstance(options, (list, tuple)):
        return None
    return [str(o) for o in options]


def record_name(extra_info: Mapping[str, Any] | None) -> str:
    """"record id 'x' (index 3)" from a verl row's ``extra_info``, or "" when it names none."""
    if not isinstance(extra_info, Mapping):
        return ""
    parts = [f"{key} {extra_info[key]!r}" for key in ("id", "index") if extra_info.get(key) is not None]
    return f"record {', '.join(parts)}" if parts else ""
