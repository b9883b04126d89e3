"""Reward golden cases: answer (1.0) after the last </think>, format (0.2), and the pitfalls."""

from __future__ import annotations

import json

import numpy as np
import pytest

from soft_spatial.data.reward import compute_score, format_ok, is_correct, options_from_extra_info

OPTS = {"options": ["left", "right", "in front", "behind"]}


def score(response: str, gold: str = "B", extra=OPTS) -> tuple[float, float, float]:
    result = compute_score("omnispatial", response, gold, extra)
    assert set(result) == {"score", "acc", "format"}
    assert result["score"] == pytest.approx(result["acc"] + result["format"])
    return result["score"], result["acc"], result["format"]


@pytest.mark.parametrize(
    "response, expected",
    [
        # (score, acc, format)
        ("<think>left or right?</think>B", (1.2, 1.0, 0.2)),
        ("reasoning</think>\n\nB\n", (1.2, 1.0, 0.2)),
        ("reasoning</think>C", (0.2, 0.0, 0.2)),  # well formed, wrong
        ("reasoning</think>\nAnswer: B", (1.0, 1.0, 0.0)),  # right, but not a bare letter
        ("reasoning</think> (B)", (1.0, 1.0, 0.0)),
        ("reasoning</think> B.", (1.0, 1.0, 0.0)),
        ("reasoning</think> b", (1.0, 1.0, 0.0)),  # lower case: credited, not well formatted
        ("reasoning</think> right", (1.0, 1.0, 0.0)),  # option text instead of the letter
        ("reasoning</think> A cat is on the left, so B", (1.0, 1.0, 0.0)),  # article "A" is not option A
        ("reasoning</think> a", (0.0, 0.0, 0.0)),  # bare lower-case letter: A, wrong here
        ("B", (0.0, 0.0, 0.0)),  # no </think>: no credit at all
        ("<think>the answer is B", (0.0, 0.0, 0.0)),  # truncated thinking
        ("B</think>A", (0.2, 0.0, 0.2)),  # B inside thinking does not count
        ("x</think>A</think>B", (1.0, 1.0, 0.0)),  # last </think> decides; two of them: no format
        ("x</think>", (0.0, 0.0, 0.0)),
        ("x</think>E", (0.0, 0.0, 0.0)),
        ("x</think>BC", (0.0, 0.0, 0.0)),
    ],
)
def test_golden(response, expected):
    assert score(response) == pytest.approx(expected)


@pytest.mark.parametrize("gold", ["B", " b ", "B.", "(B)", "B)", "[b]", "Option B", "option: b", "Answer: B",
                                  "Ｂ", "right", " Right. "])
def test_gold_letter_forms(gold):
    assert score("x</think>B", gold=gold) == pytest.approx((1.2, 1.0, 0.2))
    assert score("x</think>C", gold=gold)[1] == 0.0


@pytest.mark.parametrize("gold", [None, "1", "2", 1, 1.0, "Z", "E", "B or C", "BC", "", "(B", "**B**", "up"])
def test_a_gold_answer_that_names_no_option_is_refused_naming_it_and_the_record(gold):
    # before: every response scored 0 with no warning; "1" may be 0- or 1-based: never guessed
    extra = {**OPTS, "index": 7, "id": "q7"}
    with pytest.raises(ValueError) as info:
        compute_score("omnispatial", "x</think>B", gold, extra)
    message = str(info.value)
    assert "omnispatial, record id 'q7', index 7: gold answer" in message and repr(gold) in message
    with pytest.raises(ValueError, match="gold answer"):
        compute_score("omnispatial", "x</think>B", gold, None)  # without options: A-D, no texts


def test_duplicate_option_texts():
    extra = {"options": ["left", "Right", "right.", "behind"]}
    assert score("x</think>C", gold="B", extra=extra) == pytest.approx((1.2, 1.0, 0.2))
    assert score("x</think>D", gold="B", extra=extra)[1] == 0.0
    assert is_correct("C", "B", ["l", "r", "r"]) and not is_correct("C", "B", None)


@pytest.mark.parametrize(
    "extra",
    [
        {"options": json.dumps(["left", "right", "in front", "behind"])},
        {"options": ("left", "right", "in front", "behind")},
        {"options": np.array(["left", "right", "in front", "behind"], dtype=object)},
    ],
)
def test_options_encodings(extra):
    assert options_from_extra_info(extra) == ["left", "right", "in front", "behind"]
    assert score("x</think> right", extra=extra)[1] == 1.0


def test_without_options():
    assert options_from_extra_info(None) is None
    assert options_from_extra_info({"options": "not json"}) is None
    assert score("x</think>B", extra=None) == pytest.approx((1.2, 1.0, 0.2))
    assert score("x</think> right", extra={}) == (0.0, 0.0, 0.0)


def test_format_rule():
    assert format_ok("</think>D")
    assert format_ok("long\nreasoning</think> \n A \n")
    assert not format_ok("no end tag B")
    assert not format_ok("</think>a")
    assert not format_ok("</think>A.")
    assert not format_ok("</think>Answer: A")
    assert not format_ok("x</think>y</think>A")


def test_verl_call_convention():
    # verl passes keyword arguments, sometimes with extras the reward does not use
    result = compute_score(
        data_source="omnispatial",
        solution_str="x</think>B",
        ground_truth="B",
        extra_info={**OPTS, "num_turns": 2, "rollout_reward_scores": {}},
        reward_router_address=None,
    )
    assert result == {"score": pytest.approx(1.2), "acc": 1.0, "format": pytest.approx(0.2)}
    weighted = compute_score("omnispatial", "x</think>B", "B", OPTS, answer_reward=2.0, format_reward=0.5)
    assert weighted["score"] == pytest.approx(2.5)


@pytest.mark.parametrize("tail", ["A or B", "B, C, D", "<answer>A or B</answer>", "Answer: B or C",
                                  "answer: (B)/(D)"])
def test_a_hedge_earns_no_answer_credit_whichever_letter_is_gold(tail):
    for gold in "ABCD":
        assert score("x</think>" + tail, gold)[1] == 0.0


def test_missing_response_scores_zero():
    assert compute_score("omnispatial", None, "B") == {"score": 0.0, "acc": 0.0, "format": 0.0}
    assert not format_ok(None)


# Grading rule (docs/design.md §2.11): credit only for an unambiguous final answer statement; the
# issues' examples scored acc 1 for gold A before (issue 44: "Anything but A", "A? No.", "A would be
# a mistake", which the former negator list missed).
@pytest.mark.parametrize(
    "tail, gold, acc",
    [
        ("not A", "A", 0.0), ("A is wrong", "A", 0.0), ("The answer is not A.", "A", 0.0),
        ("A is incorrect", "A", 0.0), ("A isn't right", "A", 0.0), ("we can rule out A", "A", 0.0),
        ("Answer: A is wrong", "A", 0.0), ("<answer>not A</answer>", "A", 0.0),
        ("not A or B", "B", 0.0), ("A and B are wrong", "B", 0.0),
        ("Anything but A", "A", 0.0), ("A? No.", "A", 0.0), ("A would be a mistake", "A", 0.0),
        # a negation in the final statement, or anything after it (flipped by issue 44: were 1)
        ("A, not B", "A", 0.0), ("The answer is A, not B", "A", 0.0), ("I choose C because A is wrong", "C", 0.0),
        ("A. The chair is not to the left", "A", 0.0), ("I choose C because the cup is in front", "C", 0.0),
        # negations before the final answer statement do not count
        ("A is wrong, so B", "B", 1.0), ("Option A is not blocked, so A", "A", 1.0),
        ("The cup is not in front. I choose C.", "C", 1.0),
        ("<answer>B</answer> A is wrong", "B", 1.0), ("\\boxed{B}", "B", 1.0), ("Ｂ", "B", 1.0),
        ("neither A nor C, so D", "D", 1.0),
    ],
)
def test_negations_earn_no_answer_credit(tail, gold, acc):
    assert score("x</think>" + tail, gold)[1] == acc


def test_nested_tags_and_megabyte_responses_score():
    nested = "x</think>" + "<answer>" * 1_000 + "B" + "</answer>" * 1_000  # 2,003 tokens
    assert score(nested)[:2] == (1.0, 1.0)
    rambling = "x</think>" + "A cat is on the left. " * 500_000 + "so B"  # 11 MB
    assert score(rambling)[:2] == (1.0, 1.0)
    assert score("x</think>" * 1_000_000 + "B") == (1.0, 1.0, 0.0)  # the last one decides; no format
