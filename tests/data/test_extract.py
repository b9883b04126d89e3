"""Answer extractors: golden cases for our protocol and each benchmark's official one."""

from __future__ import annotations

import pytest

from soft_spatial.data.extract import (
    answer_tail,
    extract_answer,
    extract_mindcube_official,
    extract_omnispatial_official,
    extract_ours,
    extract_spatialab,
    parse_choice,
)

OPTIONS = ["left", "right", "in front", "behind"]


# --- ours -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "response, expected",
    [
        ("reasoning</think>B", "B"),
        ("reasoning</think>\n\n  C  \n", "C"),
        ("r</think>\nAnswer: C", "C"),
        ("r</think> answer: b", "B"),
        ("r</think> The answer is (d).", "D"),
        ("r</think> (C)", "C"),
        ("r</think> C.", "C"),
        ("r</think> **A**", "A"),
        ("r</think> c", "C"),
        ("r</think> <answer>B</answer>", "B"),
        ("r</think> <answer>C. in front</answer>", "C"),
        ("r</think> B. right", "B"),
        ("r</think> A cat is on the left, so B", "B"),
        ("r</think> A dog sits there. Final answer: D", "D"),
        ("r</think> A is correct", "A"),
        ("r</think> the answer is a cat", None),
        ("r</think> behind", "D"),
        ("r</think> Answer: in front.", "C"),
        ("r</think> I choose C because A is wrong", None),  # the last statement naming a letter refuses A
        ("r</think> I choose C because the chair is left", None),  # the answer must end the response
        ("<think>A looks right</think> nothing chosen", None),
        ("A. left is my answer", None),  # no </think>: no answer at all
        ("a</think> A</think> D", "D"),  # only the text after the LAST </think> counts
        ("r</THINK> B", "B"),
    ],
)
def test_ours_golden(response, expected):
    assert extract_ours(response, OPTIONS) == expected


def test_ours_letters_follow_the_options():
    assert extract_ours("r</think> C", ["x", "y"]) is None  # no option C
    assert extract_ours("r</think> C") == "C"  # without options: A-D
    assert extract_ours("r</think> E", ["1", "2", "3", "4", "5"]) == "E"  # MindCube may have 5
    assert parse_choice("Point B", ["Point B", "Point A"]) == "A"  # an option's text beats a letter inside it


def test_answer_tail():
    assert answer_tail("a</think>b</think>c") == "c"
    assert answer_tail("no end") is None


# The grading rule's case table (docs/design.md §2.11): the letter our protocol reads, or None.
# Credit only for an unambiguous final answer statement: the response's last statement must be an
# answer statement naming one option, with no negation, doubt, question or hedge in it. Cases the
# rule of issue 44 flipped (they were read as a letter by the former negator list) are marked
# "flipped".
NEGATION_CASES = [
    # a negated letter is no answer
    ("not A", None), ("Not A.", None), ("NOT (A)", None), ("A is wrong", None),
    ("The answer is not A.", None), ("A is incorrect", None), ("A is false", None),
    ("A isn't right", None), ("A isn’t correct", None), ("The answer isn't (A)", None),
    ("A is not the answer", None), ("A is the wrong answer", None), ("A seems unlikely", None),
    ("We can rule out A", None), ("Exclude option A", None), ("everything except A", None),
    ("A can be ruled out", None), ("It cannot be A", None), ("It can't be **A**", None),
    ("Answer: A is wrong", None), ("<answer>not A</answer>", None), ("<answer>not A</answer> B", None),
    # issue 44: the negator list missed these; no answer statement names A in them
    ("Anything but A", None), ("A? No.", None), ("A would be a mistake", None), ("Surely not A", None),
    ("A, I doubt it", None), ("Is it A?", None), ("Maybe A", None), ("The answer is probably A", None),
    # a negation covers its whole list; a list of letters is a hedge anyway
    ("not A or B", None), ("A and B are wrong", None), ("A or B is wrong", None),
    ("neither A nor B", None), ("not only A but also B", None), ("A. left\nB. right", None),
    # a negation inside the final statement, or anything after it: no credit (flipped)
    ("A, not B", None), ("The answer is A, not B", None), ("B, not A", None), ("Not A but B", None),
    ("I choose C because A is wrong", None), ("Answer: B. A is wrong", None), ("A is not blocked", None),
    ("A is correct; not B", None), ("not only B", None), ("The knot B", None),
    ("A. The chair is not to the left", None), ("B, because the chair is left", None),
    ("Final answer: B\n\nThe chair is not on the left.", None), ("A. Hmm, scratch that.", None),
    # negations before the final answer statement do not count
    ("A is wrong, so B", "B"), ("A and C are wrong, so B", "B"), ("neither A nor C, so D", "D"),
    ("B isn't right; A", "A"), ("Not A. B", "B"), ("It is not B.\nAnswer: C", "C"),
    ("Option A is not blocked, so A", "A"),
    ("It is not A cat, so D", "D"), ("cannot tell; B", "B"), ("The chair is not left, so the answer is B", "B"),
    # the last answer statement counts
    ("The answer is B. Actually, the answer is C.", "C"), ("Answer: B\nAnswer: C", "C"),
    ("B. left", None),  # letter B, text of A: two options
    # dashes set off a statement; a bare option after one belongs to what precedes it
    ("Not A — the answer is B.", "B"), ("B — the chair is on the left", None), ("Maybe — B", None),
    ("Option C – in front", "C"), ("Answer: B — left", None), ("Not sure: B", None),
    # an option's text with its letter after it; list bullets, quotes and LaTeX delimiters are markup
    ("right (B)", "B"), ("right (C)", None), ("- **Answer:** C", "C"), ("> Answer: D", "D"),
    ("Therefore, the answer is \\(\\boxed{D}\\).", "D"), ("Correction: the answer is C", "C"),
    # tags, boxes, official formats, unicode
    ("<answer>B</answer>", "B"), ("<answer>B. right</answer> A is wrong", "B"),
    ("<answer>I think</answer> B", None), ("\\boxed{B}", "B"), ("Answer: B", "B"),
    ("<answer>C. in front</answer>", "C"), ('```json\n{"answer": "B"}\n```', "B"),
    ("Ｂ", "B"), ("Answer：Ｃ", "C"), ("\u00a0B\u00a0", "B"), ("B\u200b", "B"), ("not\u00a0A", None),
]


@pytest.mark.parametrize("tail, expected", NEGATION_CASES)
def test_negation_cases(tail, expected):
    assert extract_ours("r</think> " + tail, OPTIONS) == expected
    assert extract_spatialab("r</think> " + tail, OPTIONS) == expected  # the stand-in follows ours


#: issue 55 item 14 (options -1, 0, 1, 2): every one of these earned option "1" (C). A sign or a
#: comparison before a number is part of the answer: "- 1" is -1, "+ 1" is 1 (a plus sign or a
#: bullet, the number 1 either way), "> 1" is a range and names no option; a letter's own text
#: after a spaced hyphen is still its text ("C - 1": C, whose text is 1)
SIGNED_CASES = [
    ("The answer is - 1", "A"), ("- 1", "A"), ("+ 1", "C"), ("> 1", None), ("-1", "A"), ("+1", "C"),
    ("Answer: - 1", "A"), ("Answer: -1.", "A"), ("\u22121", "A"), ("**- 1**", "A"), ("The answer is > 1", None),
    ("< 2", None), (">= 0", None), ("\u2265 0", None), ("~1", None), ("\u00b1 1", None), ("> -1", None),
    ("C - 1", "C"), ("C -1", None), ("A. -1", "A"), ("-1 (A)", "A"), ("1", "C"), ("Answer -- 1", "C"),
    ("- **Answer:** D", "D"), ("> **Answer:** B", "B"),  # bullets and quotes before words stay markup
]


@pytest.mark.parametrize("tail, expected", SIGNED_CASES)
def test_a_sign_or_comparison_before_a_number_is_part_of_the_answer(tail, expected):
    options = ["-1", "0", "1", "2"]
    assert extract_ours("r</think>" + tail, options) == expected
    assert extract_spatialab("r</think>" + tail, options) == expected


import json  # noqa: E402
from pathlib import Path  # noqa: E402

#: the independent corpus of answer phrasings (tests/data/answer_corpus/README.md): written and
#: labelled blind to this extractor by the rule of docs/design.md §2.11
CORPUS = Path(__file__).parent / "answer_corpus"
_PREAMBLE = ("free words before the answer: the grammar knows no preamble before a cue (a condition, "
             "a doubt or a negation could stand there)")
_AFTER = ("text after the answer: the final answer statement must end the response (an explanation "
          "cannot be told from a withdrawal without a list of words)")
_EMOJI = "an emoji in the statement: not markup to the grammar (a check mark or a cross could affirm or negate)"
_VALUE = "an option's text as the value of a free sentence ('The count is 2'): not an answer statement"
#: credited items the extractor does not credit (misses: no credit, the safe error), by id and why;
#: dev.jsonl's after the generic fixes it showed, heldout.jsonl's as found after its evaluation
#: (docs/design.md §2.11). A false credit is never listed: every null item must stay uncredited.
KNOWN_MISSES = {
    "dev-article-01": _PREAMBLE, "dev-article-02": _PREAMBLE, "dev-article-05": _AFTER, "dev-article-06": _PREAMBLE,
    "dev-emoji-01": _EMOJI, "dev-emoji-02": _EMOJI, "dev-explanation-01": _AFTER, "dev-explanation-02": _AFTER,
    "dev-explanation-03": _AFTER, "dev-explanation-04": _AFTER, "dev-explanation-05": _AFTER,
    "dev-explanation-06": _AFTER, "dev-inword-01": _PREAMBLE, "dev-inword-06": _PREAMBLE,
    "dev-neg_then_answer-04": _PREAMBLE, "dev-number-03": _VALUE, "dev-selfcorrect-04": _PREAMBLE,
    "ho-article-01": _PREAMBLE, "ho-article-06": _PREAMBLE, "ho-emoji-01": _EMOJI, "ho-emoji-02": _EMOJI,
    "ho-explanation-01": _AFTER, "ho-explanation-02": _AFTER, "ho-explanation-03": _AFTER,
    "ho-explanation-04": _AFTER, "ho-explanation-05": _AFTER, "ho-inword-02": _PREAMBLE, "ho-inword-05": _PREAMBLE,
    "ho-neg_then_answer-04": _PREAMBLE, "ho-number-02": _VALUE,
    "ho-phrase-09": "a cue the grammar lacks ('I'm going with')",
    "ho-selfcorrect-03": "a correction introduced by 'No wait,' (a comma, no statement boundary): one statement",
    "ho-selfcorrect-04": _PREAMBLE,
}
CORPUS_ITEMS = [json.loads(line) for name in ("dev.jsonl", "heldout.jsonl")
                for line in (CORPUS / name).read_text(encoding="utf-8").splitlines() if line.strip()]


def test_the_corpus_and_its_known_misses_are_what_the_tests_read():
    ids = [item["id"] for item in CORPUS_ITEMS]
    assert len(ids) == len(set(ids)) == 319
    credited = {item["id"] for item in CORPUS_ITEMS if item["credit"] is not None}
    assert set(KNOWN_MISSES) <= credited  # a miss is a credited item; a null item is never listed


@pytest.mark.parametrize("item", CORPUS_ITEMS, ids=[item["id"] for item in CORPUS_ITEMS])
def test_answer_corpus(item):
    options = [item["options"][letter] for letter in "ABCD"]
    response = "reasoning</think>" + item["text"]
    found = {extract_ours(response, options), extract_spatialab(response, options)}
    if item["credit"] is None:
        assert found == {None}, f"false credit: {item['why']}"  # zero tolerated
    elif item["id"] in KNOWN_MISSES:
        assert found == {None}  # a documented miss; once read, take it off the list
    else:
        assert found == {item["credit"]}, item["why"]


@pytest.mark.parametrize("response, omni, mindcube", [
    ("Answer: A is wrong", "A", "A"), ("The answer is not A.", "A", "A"), ("<answer>not A</answer>", "A", "A"),
    ("Answer: not B", "A", "B"),
])
def test_official_extractors_stay_faithful_and_credit_negations(response, omni, mindcube):
    # evaluation comparability: the official protocols are reproduced as published, negations
    # included (OmniSpatial's "A" fallback also makes "not B" an A); only ours refuses them
    assert extract_omnispatial_official(response) == omni
    assert extract_mindcube_official(response) == mindcube


# --- OmniSpatial official -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "response, compat, strict",
    [
        ("The lamp is left of the sofa.\nAnswer: C", "C", "C"),
        ("answer: b", "b", "B"),  # regex is case-insensitive, comparison is not: "b" != "B"
        ("I cannot tell.", "A", None),  # the official "A" fallback
        ("<think>… A …</think>\nAnswer: D", "D", "D"),
        ("Answer: A\nWait. Answer : B", "B", "B"),  # last match
        ("Answer: E", "A", None),  # only A-D
    ],
)
def test_omnispatial_official_re(response, compat, strict):
    assert extract_omnispatial_official(response) == compat
    assert extract_omnispatial_official(response, compat=False) == strict
    assert extract_answer("omnispatial", response, "official") == compat
    assert extract_answer("omnispatial", response, "official", compat=False) == strict


def test_omnispatial_official_other_eval_types():
    assert extract_omnispatial_official("  b, because", "direct") == "B"
    assert extract_omnispatial_official("<think>x</think>B", "direct") == "<"  # the known thinking-model break
    assert extract_omnispatial_official('```json\n{"analysis": "x", "answer": "C"}\n```', "json") == "C"
    assert extract_omnispatial_official("not json", "json") == "A"
    assert extract_omnispatial_official("not json", "json", compat=False) is None
    with pytest.raises(ValueError):
        extract_omnispatial_official("x", "llm")


# --- MindCube official ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "response, expected",
    [
        ("<answer>B. Door</answer>", "B"),
        ("The answer is C", "C"),
        ("Answer: D", "D"),
        ("Looking at image A. the door is left. <answer>C. left</answer>", "C"),  # last "X." wins
        ("<answer>C. left</answer> as image B. shows", "B"),  # ... even when it is a stray letter
        ("<think>view B. is key</think><answer>A</answer>", "B"),  # no think stripping (official)
        ("<Answer>my answer is D", "D"),
        ('I pick "E"', "E"),
        ("The cube is in view C of the scene", "C"),
        ("first line B\nsecond line", "B"),
        ("the answer is c", None),  # no case folding
        ("No letter here at all", None),
        ("", None),
    ],
)
def test_mindcube_official(response, expected):
    assert extract_mindcube_official(response) == expected
    assert extract_answer("mindcube", response, "official") == expected


# --- SpatiaLab stand-in ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "response, expected",
    [
        ("<think>maybe A</think>\nAnswer: c", "C"),
        ("<think>Answer: A</think> B", "B"),
        ("Reasoning without a think block.\nAnswer: D", "D"),
        ("<think>x</think> in front", "C"),
        ("<think>x</think> no idea", None),
        ("<think>x</think> Answer: a cat is left", None),
    ],
)
def test_spatialab_stand_in(response, expected):
    assert extract_spatialab(response, OPTIONS) == expected
    assert extract_answer("spatialab", response, "official", options=OPTIONS) == expected


def test_dispatcher():
    assert extract_answer("mindcube", "x</think> B", "ours") == "B"
    assert extract_answer("mindcube", "x</think> B", "official") == "B"
    with pytest.raises(ValueError, match="protocol"):
        extract_answer("mindcube", "B", "lmms")
    with pytest.raises(ValueError, match="benchmark"):
        extract_answer("vsibench", "B", "official")


# --- adversarial inputs: no recursion, linear-time patterns, hedges -----------------------------
import re  # noqa: E402

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from soft_spatial.data.extract import ANSWER_WINDOW, OFFICIAL_WINDOW  # noqa: E402

PROPERTY = settings(max_examples=200, deadline=None, derandomize=True)
# pieces that steer every rule of every extractor: tags, cues, letters, option marks, runs
PIECES = ["</think>", "<answer>", "</answer>", "<Answer>", "answer", "Answer:", "the answer is ",
          "I choose ", "correct option", " or ", ", ", "/", " and ", "A", "B", "C", "D", "E", "a",
          "b", "c", " ", "  ", "\n", "*", "**", "(", ")", ".", ":", "A cat ", "is ", "left",
          "right", '"', "My answer is ", "X"]
adversarial = st.lists(st.sampled_from(PIECES), max_size=60).map("".join)


def test_nested_answer_tags_parse_without_recursion():
    nested = "r</think>" + "<answer>" * 1_000 + "B" + "</answer>" * 1_000  # 2,003 tokens
    assert extract_ours(nested) == "B"
    assert extract_answer("omnispatial", nested) == "B"
    assert extract_spatialab(nested, OPTIONS) == "B"
    assert extract_ours("r</think>" + "<answer>" * 1_000 + "C") == "C"  # unclosed
    deep = "r</think>" + "<answer>" * 100_000 + "B" + "</answer>" * 100_000  # 1.7 MB
    assert extract_ours(deep) is None  # no RecursionError; the letter is beyond ANSWER_WINDOW
    assert extract_mindcube_official(deep) == "B"


@pytest.mark.parametrize(
    "tail",
    ["A or B", "B, C, D", "<answer>A or B</answer>", "Answer: A or B", "answer: B/C",
     "Answer: (B) or (C)", "The answer is B, C or D", "I choose **A** and **B**", "A and B"],
)
def test_hedges_name_no_answer(tail):
    assert extract_ours("r</think> " + tail, OPTIONS) is None
    assert extract_spatialab("r</think> " + tail, OPTIONS) is None


@pytest.mark.parametrize(
    "tail, expected",
    [("Answer: B or rather B", None), ("A cat is on the left, so B", "B"),  # the first: flipped
     ("So, the cup is in front, so C", "C"), ("Answer: B. A and C are wrong", None)],  # flipped
)
def test_one_letter_among_words_is_not_a_hedge(tail, expected):
    assert extract_ours("r</think> " + tail, OPTIONS) == expected


def test_missing_response_is_no_answer():
    assert extract_ours(None) is None and answer_tail(None) is None
    for bench in ("omnispatial", "mindcube", "spatialab"):
        extract_answer(bench, None, "official")  # no TypeError
        assert extract_answer(bench, None, "ours") is None


def test_only_the_end_of_a_long_tail_is_read():
    filler = "A cat is on the left. " * 500_000  # 11 MB of articles
    assert extract_ours("r</think>" + filler + "so B", OPTIONS) == "B"
    assert extract_ours("r</think>Answer: C " + "x" * ANSWER_WINDOW) is None  # the cue is out of reach
    assert extract_ours("r</think>" + "answer" + " " * 10_000_000 + "D") == "D"


def test_official_extractors_read_the_last_mebibyte():
    head = "My answer is D. " + "x" * OFFICIAL_WINDOW
    assert extract_mindcube_official(head) is None  # the only "X." is out of reach
    assert extract_mindcube_official(head[-OFFICIAL_WINDOW:] + " C") == "C"
    assert extract_omnispatial_official("Answer: B " + "-" * OFFICIAL_WINDOW, compat=False) is None
    # adversarial 10 MB inputs: the same answer as their last mebibyte, no recursion
    for text in ("Answer:" + " " * 10_000_000, "A" * 10_000_000, "<Answer>" * 1_250_000,
                 "A, " * 3_333_333, "Answer: B " * 1_000_000):
        tail = text[-OFFICIAL_WINDOW:]
        assert extract_mindcube_official(text) == extract_mindcube_official(tail)
        assert extract_omnispatial_official(text) == extract_omnispatial_official(tail)
    assert extract_mindcube_official("A, " * 3_333_333) == "A"  # a lone letter (last rule)
    assert extract_omnispatial_official("Answer: B " * 1_000_000) == "B"


@PROPERTY
@given(adversarial)
def test_every_extractor_returns_an_allowed_letter_or_none(text):
    for found in (extract_ours(text, OPTIONS), extract_spatialab(text, OPTIONS),
                  extract_answer("omnispatial", text, "official", compat=False),
                  extract_mindcube_official(text), parse_choice(text)):
        assert found is None or found in "ABCDE"
    assert extract_ours(text, OPTIONS) in (None, "A", "B", "C", "D")


@PROPERTY
@given(adversarial, st.sampled_from("ABCD"),
       st.sampled_from(["{}", " {} ", "({})", "{}.", "**{}**", "<answer>{}</answer>", "Answer: {}"]))
def test_a_clean_answer_after_the_last_think_end_is_read(junk, letter, shape):
    assert extract_ours(junk + "</think>" + shape.format(letter)) == letter


OPENERS = ["", "So ", "so, ", "Therefore, ", "Thus ", "Finally, ", "Overall, ", "In conclusion, ", "Actually, "]
CUES = ["", "Answer: ", "answer:", "The answer is ", "the final answer is: ", "Final Answer: ",
        "The correct answer is ", "The correct option is ", "My answer is ", "My choice: ", "I choose ",
        "i pick ", "I'll go with ", "I will select ", "It is ", "It's ", "The answer is option ", "Option "]
LETTER_SHAPES = ["{l}", "({l})", "[{l}]", "**{l}**", "'{l}'", "\\boxed{{{l}}}", "$\\boxed{{{l}}}$", "`{l}`", "{l}.",
                 "({l}).", "{l}!", "{l} ({t})", "{l}) {t}", "{l}: {t}", "{l}. {t}"]


@PROPERTY
@given(st.sampled_from(OPENERS), st.sampled_from(CUES), st.sampled_from(LETTER_SHAPES), st.sampled_from("ABCD"),
       st.sampled_from(["", "A is wrong. ", "Not B; ", "We see a chair.\n", "It is not C, so "]),
       st.sampled_from(["", "\n", "  \n\n"]), st.booleans())
def test_every_answer_statement_of_the_grammar_is_read(opener, cue, shape, letter, before, after, upper):
    # the grammar of docs/design.md §2.11, combined freely: opener, cue, decorated letter (with
    # its option's text or not), after statements that do not count
    options = [f"opt {c}" for c in "ABCD"]
    lead = (opener + cue).upper() if upper else opener + cue  # the words in capitals, the letter as it is
    statement = lead + shape.format(l=letter, t=f"opt {letter}")
    assert parse_choice(before + statement + after, options) == letter
    # one word more in the statement (a doubt, a negation), a question, another option's text, or
    # anything after the statement: no answer
    if ". " not in shape:  # "not B. opt B": the option's text is a statement of its own
        for word in ("maybe ", "not ", "probably "):
            assert parse_choice(before + lead + word + shape.format(l=letter, t=f"opt {letter}") + after,
                                options) is None
    assert parse_choice(before + statement.rstrip(".!") + "?" + after, options) is None
    other = "A" if letter != "A" else "B"
    if "{t}" in shape:
        assert parse_choice(before + lead + shape.format(l=letter, t=f"opt {other}") + after, options) is None
    for explanation in ("\nThe chair is on the left.", ". It fits the view.", " because it fits"):
        assert parse_choice(before + statement + explanation, options) is None


def _mindcube_reference(response):
    """MindCube's official cascade exactly as the spec lists it: every rule, one search per line."""
    def last(pattern, text):
        found = list(re.finditer(pattern, text))
        return found[-1].group(1) if found else None

    def first_rule(patterns, text):
        for pattern in patterns:
            found = last(pattern, text)
            if found:
                return found
        return None

    from soft_spatial.data.extract import _MC_IN_ANSWER_TAG, _MC_LINE_DESC, _MC_RULES, _MC_SIMPLE
    if not response:
        return None
    found = last(_MC_SIMPLE, response)
    if found:
        return found
    section = re.search(r"<Answer>(.*?)(?:<|$)", response, re.DOTALL)
    if section:
        found = first_rule(_MC_IN_ANSWER_TAG, section.group(1))
        if found:
            return found
    found = first_rule(_MC_RULES, response)
    if found:
        return found
    for pattern in (_MC_LINE_DESC, r"\b([A-E])\b"):
        for line in reversed(response.split("\n")):
            match = re.search(pattern, line)
            if match:
                return match.group(1)
    return None


@PROPERTY
@given(adversarial)
def test_mindcube_official_matches_the_rule_by_rule_cascade(text):
    assert extract_mindcube_official(text) == _mindcube_reference(text)
