"""The question record (`soft_spatial.data.record`): option letters, the answer's text, and a
record that refuses an answer naming none of its options."""

from __future__ import annotations

import re

import pytest

from soft_spatial.data import QuestionRecord, index_to_letter, letter_to_index, option_letters


def test_letter_helpers():
    assert option_letters(3) == ["A", "B", "C"]
    assert letter_to_index("c") == 2 and index_to_letter(3) == "D"
    rec = QuestionRecord("q", [], "Q?", ["x", "y", "z"], "B", "omnispatial", "Complex_Logic")
    assert rec.letters == ["A", "B", "C"]
    assert rec.answer_index == 1 and rec.answer_text == "y"
    assert rec.option_text("c") == "z"
    with pytest.raises(KeyError):
        rec.option_text("D")
    with pytest.raises(ValueError):
        letter_to_index("AB")


def test_a_record_refuses_an_answer_that_is_not_one_of_its_letters():
    for answer in ("A.", "(A)", "1", "a", "D", None):
        with pytest.raises(ValueError, match=re.escape(f"record 'q': answer {answer!r} is not one of")):
            QuestionRecord("q", [], "Q?", ["x", "y", "z"], answer, "omnispatial", "Complex_Logic")
    assert QuestionRecord("q", [], "Q?", ["x", "y", "z"], "C", "omnispatial", "Complex_Logic").answer_text == "z"
