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
        ("r</think> I choose C because A is wrong", "C"),
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
