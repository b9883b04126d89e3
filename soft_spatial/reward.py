"""Answer + format reward for multiple-choice spatial questions (verl ``compute_score`` signature).

score = answer + format, in {0, 0.2, 1.0, 1.2} with the default weights:

* answer (1.0): the letter our extractor reads after the LAST ``</think>`` (see
  `soft_spatial.data.extract.parse_choice`) equals the gold letter, or names an option whose text
  equals the gold option's text (duplicate options). No ``</think>`` means no answer credit, and
  so does a hedge that names several different letters ("A or B", "B, C, D").
* format (0.2): exactly one ``</think>``, followed only by one capital letter A-D (surrounding
  whitespace allowed). Nothing else may follow: no "Answer:", no period.

Use in verl: ``reward.custom_reward_function.path=<this file>``, ``name=compute_score``.
"""

from __future__ import annotations

import json
import re
from typing import Any
from collections.abc import Mapping, Sequence

from soft_spatial.data.extract import extract_ours, normalise_option_text, think_ends
from soft_spatial.data.record import LETTERS

ANSWER_REWARD = 1.0
FORMAT_REWARD = 0.2

_FORMAT_TAIL = re.compile(r"\s*[A-D]\s*")


def format_ok(response: str | None) -> bool:
    """Exactly one ``</think>``, then a single capital letter A-D and nothing else but whitespace."""
    count, tail = think_ends(response)
    return count == 1 and _FORMAT_TAIL.fullmatch(tail) is not None


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


def _gold_letter(ground_truth: Any, options: Sequence[str] | None) -> str | None:
    """The gold letter from a letter (any case) or, failing that, from the gold option's text."""
    if ground_truth is None:
        return None
    text = str(ground_truth).strip()
    if len(text) == 1 and text.upper() in LETTERS:
        return text.upper()
    if options:
        wanted = normalise_option_text(text)
        for i, option in enumerate(options):
            if normalise_option_text(option) == wanted:
                return LETTERS[i]
    return None


def is_correct(predicted: str | None, gold: str | None, options: Sequence[str] | None = None) -> bool:
    """Same letter, or (duplicate options) a letter whose option text equals the gold option's."""
    if predicted is None or gold is None:
        return False
    if predicted == gold:
        return True
    if not options:
        return False
    p, g = LETTERS.index(predicted), LETTERS.index(gold)
    if p >= len(options) or g >= len(options):
        return False
    return normalise_option_text(options[p]) == normalise_option_text(options[g])


def compute_score(
    data_source: str,
    solution_str: str | None,
    ground_truth: Any,
    extra_info: Mapping[str, Any] | None = None,
    answer_reward: float = ANSWER_REWARD,
    format_reward: float = FORMAT_REWARD,
    **kwargs: Any,
) -> dict[str, float]:
    """``{"score", "acc", "format"}`` for one response (verl custom-reward signature).

    ``acc`` is 1.0/0.0 (answer correctness), ``format`` is the format reward actually given, and
    ``score = answer_reward * acc + format``. Extra keyword arguments from verl are ignored. A
    missing response or gold answer (None) scores 0. Linear time in the response length.
    """
    options = options_from_extra_info(extra_info)
    gold = _gold_letter(ground_truth, options)
    predicted = extract_ours(solution_str, options)
    acc = 1.0 if is_correct(predicted, gold, options) else 0.0
    fmt = format_reward if format_ok(solution_str) else 0.0
    return {"score": answer_reward * acc + fmt, "acc": acc, "format": fmt}
