"""Gold answers (`soft_spatial.data.gold`): every unambiguous form of a letter reads as that letter,
anything else (numbers, hedges, letters with no option) is refused naming the value; the reward
credits through the same reading."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from grading import EXTRA, LETTER, OPTIONS, PROPERTY, credit
from soft_spatial.data.gold import gold_letter, parse_letter
from soft_spatial.data.reward import compute_score

GOLD_FORMS = st.tuples(st.sampled_from(["{}", " {} ", "{}.", "({})", "{})", "[{}]", "Option {}", "option: {}",
                                        "\u00a0{}\u00a0"]), LETTER, st.booleans()).map(
    lambda t: (t[0].format(t[1] if t[2] else t[1].lower()), t[1]))


@PROPERTY
@given(GOLD_FORMS, LETTER)
def test_unambiguous_gold_forms_are_read_as_their_letter(gold, response_letter):
    written, letter = gold
    assert parse_letter(written) == gold_letter(written, OPTIONS) == letter
    assert credit(f"r</think>{response_letter}", written) == float(letter == response_letter)


@PROPERTY
@given(st.one_of(st.integers(-3, 30), st.integers(0, 30).map(str), st.sampled_from(
    ["B or C", "B, C", "BC", "(B", "**B**", "", " ", "none", "E", "Z", "B. right", "1.", "option 2"])))
def test_ambiguous_gold_answers_are_refused_naming_the_value(gold):
    with pytest.raises(ValueError, match="gold answer"):
        compute_score("omnispatial", "r</think>B", gold, {**EXTRA, "id": "q1"})
    with pytest.raises(ValueError, match="gold answer"):
        gold_letter(gold, OPTIONS)
