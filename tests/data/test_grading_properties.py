"""Properties of the grading rule (docs/design.md §2.11) for the reward and every answer extractor:
adversarial negations, hedges, casing, whitespace, tags, numbers and unicode."""

from __future__ import annotations

import unicodedata

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from soft_spatial.data.extract import extract_answer, extract_ours, extract_spatialab, parse_choice
from soft_spatial.data.extract import extract_mindcube_official, extract_omnispatial_official
from soft_spatial.data.reward import compute_score, format_ok
from grading import EXTRA, LETTER, OPTIONS, PROPERTY, credit


def ours_and_stand_in(response: str) -> set:
    """What our protocol reads, by each of its entry points (they must agree)."""
    return {extract_ours(response, OPTIONS), extract_spatialab(response, OPTIONS),
            extract_answer("omnispatial", response, "ours", options=OPTIONS)}


def any_case(words: str) -> st.SearchStrategy[str]:
    """``words`` with each character's case drawn independently ("nOt", "IS wRoNg")."""
    return st.lists(st.booleans(), min_size=len(words), max_size=len(words)).map(
        lambda flips: "".join(c.upper() if f else c.lower() for c, f in zip(words, flips)))


SPACE = st.sampled_from([" ", "  ", "\t", "\u00a0", " \u200b", "\u3000"])  # NBSP, zero-width, ideographic
NEGATOR = st.sampled_from(["not", "never", "isn't", "is not", "cannot be", "can't be", "rule out", "ruled out",
                           "exclude", "excluding", "except", "eliminate", "rather than", "instead of",
                           "other than", "neither", "it is not option", "won't choose"]).flatmap(any_case)
REFUSALS = st.sampled_from(["is wrong", "is incorrect", "is false", "is not correct", "isn't right",
                            "is not the answer", "can be ruled out", "is the wrong answer", "seems wrong",
                            "would be incorrect", "was eliminated", "cannot be right", "is impossible",
                            "does not fit"])
REFUSAL = REFUSALS.flatmap(any_case)
DECORATED = st.tuples(st.sampled_from(["{}", "({})", "**{}**", "'{}'", "[{}]"]), LETTER).map(
    lambda t: t[0].format(t[1]))
NEGATED_BEFORE = st.tuples(NEGATOR, SPACE, DECORATED).map("".join)  # "not (B)"
NEGATED_AFTER = st.tuples(DECORATED, SPACE, REFUSAL).map("".join)  # "B is wrong"
NEGATED = st.one_of(NEGATED_BEFORE, NEGATED_AFTER)
# words, punctuation and numbers with no option letter and no option text
FILLER = st.sampled_from(["the chair", "is", "visible", "so", "because", "it", "we see", "in view 2", "3",
                          "10 cm", "Therefore", ",", ".", ";", "\n", "1)", "x", "it is blocked", "no"])


@PROPERTY
@given(st.lists(st.one_of(NEGATED, FILLER), min_size=1, max_size=8), st.booleans(), LETTER)
def test_a_response_whose_letters_are_all_negated_earns_no_answer_credit(pieces, tagged, gold):
    tail = " ".join(pieces)
    assume(any(c in tail for c in "ABCD"))  # at least one negated letter
    if tagged:
        tail = f"<answer>{tail}</answer>"
    response = "reasoning about A and B</think>" + tail
    assert ours_and_stand_in(response) == {None}
    assert credit(response, gold) == 0.0


@PROPERTY
@given(LETTER, LETTER, NEGATED, st.sampled_from(["{n}, so {c}", "{n}. {c}", "{n}; the answer is {c}",
                                                  "{n}\nAnswer: {c}", "<answer>{c}</answer> {n}", "{n}; {c}",
                                                  "{n}, therefore the answer is ({c})."]))
def test_a_final_answer_after_negated_letters_is_credited(chosen, gold, negated, shape):
    # negations in the statements before the final answer statement do not count (the last
    # answer statement counts); after </answer> nothing does
    tail = shape.format(c=chosen, n=negated)
    assert ours_and_stand_in("r</think>" + tail) == {chosen}
    assert credit("r</think>" + tail, gold) == float(chosen == gold)


@PROPERTY
@given(LETTER, LETTER, st.one_of(NEGATED, FILLER), st.sampled_from(["{c}, {n}", "{c}; {n}", "The answer is {c}, {n}",
                                                                    "Answer: {c}. {n}", "{c}\n{n}", "{c} because {n}"]))
def test_anything_after_the_final_answer_withdraws_its_credit(chosen, gold, negated, shape):
    # the final answer statement is the response's last: a negation, an explanation or a withdrawal
    # after the answer leaves no answer, whichever letter it names (the rule of issue 44: "B, not A"
    # and "Answer: B. A is wrong" were B before)
    assume(negated.strip(" .;,\n"))
    tail = shape.format(c=chosen, n=negated)
    assert ours_and_stand_in("r</think>" + tail) == {None}
    assert credit("r</think>" + tail, gold) == 0.0


@PROPERTY
@given(LETTER, LETTER, st.sampled_from([" or ", ", ", "/", " and ", " or maybe "]), st.booleans())
def test_two_different_letters_are_a_hedge(first, second, joint, cued):
    assume(first != second)
    tail = ("Answer: " if cued else "") + first + joint + second
    assert ours_and_stand_in("r</think>" + tail) == {None}
    assert credit("r</think>" + tail, first) == credit("r</think>" + tail, second) == 0.0


ANSWERS = st.tuples(st.sampled_from(["{}", "{}.", "({})", "**{}**", "<answer>{}</answer>", "Answer: {}",
                                     "The answer is {}", "I choose {}", "\\boxed{{{}}}", "<answer>({}).</answer>"]),
                    LETTER).map(lambda t: (t[0].format(t[1]), t[1]))


@PROPERTY
@given(ANSWERS, st.lists(SPACE, max_size=3).map("".join), st.lists(SPACE, max_size=3).map("".join),
       st.booleans())
def test_case_and_whitespace_around_the_answer_never_change_credit(answer, before, after, upper_cue):
    text, letter = answer
    if upper_cue:  # the cue words in capitals, the letter as it was
        text = text.replace("Answer", "ANSWER").replace("The answer is", "THE ANSWER IS").replace("choose", "CHOOSE")
    for gold in "ABCD":
        assert credit("r</think>" + before + text + after, gold) == float(gold == letter)


@PROPERTY
@given(ANSWERS)
def test_full_width_letters_read_as_ascii(answer):
    text, letter = answer
    wide = text.replace(letter, chr(ord(letter) + 0xFEE0))  # "Ｂ"
    assert ours_and_stand_in("r</think>" + wide) == {letter}
    assert not format_ok("r</think>" + wide)  # the format reward wants the ASCII letter


NUMBER_OPTIONS = st.lists(st.integers(-12, 12), min_size=2, max_size=4, unique=True)
SIGNED_AS = st.sampled_from([("-", -1), ("- ", -1), ("−", -1), ("− ", -1), ("–", -1), ("+", 1),
                             ("+ ", 1), ("", 1)])
COMPARISON = st.sampled_from(["> ", ">", "< ", "<", ">= ", "<= ", "≥ ", "≤", "~", "≈ ", "± "])
NUMBER_CUE = st.sampled_from(["{}", "{}.", "Answer: {}", "The answer is {}", "**{}**", "\\boxed{{{}}}",
                              "Final answer: {}", "<answer>{}</answer>", "So the answer is {}."])


@PROPERTY
@given(NUMBER_OPTIONS, st.integers(1, 12), SIGNED_AS, NUMBER_CUE)
def test_a_sign_before_a_number_is_part_of_the_number(options, magnitude, signed, cue):
    """Issue 55 item 14: with options -1, 0, 1, 2, "- 1" and "The answer is - 1" earned option 1 (a
    sign before a number was read as a bullet or a separator). The credited option is the one
    whose number is the signed number written, or none."""
    sign, factor = signed
    texts = [str(n) for n in options]
    value = factor * magnitude
    tail = cue.format(f"{sign}{magnitude}")
    want = {"ABCD"[options.index(value)]} if value in options else {None}
    assert {extract_ours("r</think>" + tail, texts), extract_spatialab("r</think>" + tail, texts),
            parse_choice(tail, texts)} == want, tail


@PROPERTY
@given(NUMBER_OPTIONS, st.integers(-12, 12), COMPARISON, NUMBER_CUE)
def test_a_comparison_before_a_number_names_no_option(options, value, comparison, cue):
    """"> 1" is a range, not the number 1: no option (the options name numbers alone)."""
    tail = cue.format(f"{comparison}{value}")
    assert ours_and_stand_in("r</think>" + tail) | {extract_ours("r</think>" + tail, [str(n) for n in options])} \
        == {None}, tail


SEEN = st.text(st.sampled_from("AB cd.:()<>/*\n\u00a0\u200b\uff21\uff1a"), max_size=30)


@PROPERTY
@given(st.text(max_size=40), LETTER, st.sampled_from(["{}", "Answer: {}", "not A. {}", "A is wrong, so {}"]),
       st.one_of(SEEN, st.text(max_size=30)))
def test_text_after_the_closing_answer_tag_never_changes_credit(prefix, letter, inside, appended):
    # the tags hold the answer, so what follows the last </answer> is commentary (as long as it
    # opens no new tag and no new answer section)
    seen = unicodedata.normalize("NFKC", appended).replace("\u200b", "").lower()
    assume("<answer" not in seen and "</think>" not in appended.lower())
    response = prefix.replace("</think>", "") + "</think>" + f"<answer>{inside.format(letter)}</answer>"
    for gold in "ABCD":
        assert credit(response + appended, gold) == credit(response, gold) == float(gold == letter)


PIECES = ["</think>", "<answer>", "</answer>", "not ", "isn't ", " is wrong", " or ", ", ", "Answer: ", "A", "B",
          "C", "D", "E", "a", "b", " ", "\n", "(", ")", ".", "**", "\u00a0", "\u200b", "\uff22", "1", "42",
          "A cat ", "rule out ", "except ", "only ", "neither ", " nor ", "left", "<Answer>", "\\boxed{"]
ADVERSARIAL = st.lists(st.sampled_from(PIECES), max_size=40).map("".join)


@PROPERTY
@given(ADVERSARIAL, st.sampled_from("ABCD"), st.floats(0, 5), st.floats(0, 5))
def test_credit_is_0_or_1_and_the_format_reward_never_exceeds_its_weight(text, gold, w_answer, w_format):
    result = compute_score("omnispatial", text, gold, EXTRA, answer_reward=w_answer, format_reward=w_format)
    assert result["acc"] in (0.0, 1.0)
    assert result["format"] in (0.0, w_format) and result["format"] <= w_format
    assert result["score"] == pytest.approx(w_answer * result["acc"] + result["format"])
    assert (result["acc"] == 1.0) == (extract_ours(text, OPTIONS) == gold)


@PROPERTY
@given(ADVERSARIAL)
def test_every_extractor_returns_an_allowed_letter_or_none_on_unicode_and_negations(text):
    assert ours_and_stand_in(text) <= {None, "A", "B", "C", "D"}
    for found in (extract_omnispatial_official(text), extract_omnispatial_official(text, compat=False),
                  extract_mindcube_official(text), parse_choice(text)):
        assert found is None or found in "ABCDEabcd" and len(found) == 1
    assert parse_choice(text, letters="AB") in (None, "A", "B")


@PROPERTY
@given(LETTER, REFUSALS)
def test_official_extractors_follow_their_protocol_not_our_negation_rule(letter, refusal):
    # comparability with published numbers: "Answer: B is wrong" is B to both official extractors
    response = f"Answer: {letter} {refusal}"
    assert extract_omnispatial_official(response) == letter
    assert extract_mindcube_official(response) == letter
    assert extract_ours("r</think>" + response, OPTIONS) is None
