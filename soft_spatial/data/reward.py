"""Answer + format reward for multiple-choice spatial questions (verl ``compute_score`` signature).

score = answer + format, in {0, 0.2, 1.0, 1.2} with the default weights:

* answer (1.0): the letter our extractor reads after the LAST ``</think>`` (see
  `soft_spatial.data.extract.parse_choice`) equals the gold letter, or names an option whose text
  equals the gold option's text (duplicate options). Only an unambiguous final answer statement
  earns it (the grading rule, docs/design.md §2.11): no ``</think>``, a hedge ("A or B", "B, C,
  D"), a negation, doubt or question in the final answer statement ("not A", "Anything but A",
  "A? No.", "probably A") or a letter named after it earn nothing.
* the gold answer must name one option unambiguously (`soft_spatial.data.gold.gold_letter`);
  otherwise the reward raises a ValueError naming it and the record.
* format (0.2): exactly one ``</think>``, followed only by one capital letter A-D (surrounding
  whitespace allowed). Nothing else may follow: no "Answer:", no period.

Use in verl: ``reward.custom_reward_function.path=<this file>``, ``name=compute_score``.
"""

from __future__ import annotations

import re
from typing import Any
from collections.abc import Mapping, Sequence

from soft_spatial.data.extract import extract_ours, normalise_option_text, think_ends
from soft_spatial.data.gold import gold_letter, options_from_extra_info, record_name
from soft_spatial.data.record import LETTERS

__all__ = ["compute_score", "format_ok", "is_correct", "options_from_extra_info"]

ANSWER_REWARD = 1.0
FORMAT_REWARD = 0.2

_FORMAT_TAIL = re.compile(r"\s*[A-D]\s*")


def format_ok(response: str | None) -> bool:
    """Exactly one ``</think>``, then a single capital letter A-D and nothing else but whitespace."""
    count, tail = think_ends(response)
    return count == 1 and _FORMAT_TAIL.fullmatch(tail) is not None


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
    missing response (None) scores 0; a gold answer that names no option unambiguously
    (`soft_spatial.data.gold.gold_letter`: None, "1", "B or C", a letter with no option) raises a
    ValueError naming the value and the record, rather than score every response 0. Linear time
    in the response length.
    """
    options = options_from_extra_info(extra_info)
    try:
        gold = gold_letter(ground_truth, options)
    except ValueError as e:
        where = record_name(extra_info)
        raise ValueError(f"{data_source}{', ' + where if where else ''}: {e}") from None
    predicted = extract_ours(solution_str, options)
    acc = 1.0 if is_correct(predicted, gold, options) else 0.0
    fmt = format_reward if format_ok(solution_str) else 0.0
    return {"score": answer_reward * acc + fmt, "acc": acc, "format": fmt}
