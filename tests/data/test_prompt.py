"""Chat messages: our protocol, and the official protocol's layout (the benchmarks' own prompt
texts are checked verbatim in tests/data/test_official_prompts.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from PIL import Image

from soft_spatial.data import SYSTEM_PROMPT, QuestionRecord, build_messages, load_benchmark
from soft_spatial.data.fixtures import FixtureSet
from soft_spatial.data.prompt import question_text


def test_system_prompt_says_what_the_reward_checks():
    assert "<think>" in SYSTEM_PROMPT and "</think> exactly once" in SYSTEM_PROMPT
    assert "single capital letter" in SYSTEM_PROMPT


def test_ours_omnispatial(fixture_set: FixtureSet):
    record = load_benchmark("omnispatial", fixture_set.omnispatial)[1]
    messages = build_messages(record)
    assert messages[0] == {"role": "system", "content": SYSTEM_PROMPT}
    user = messages[1]
    assert user["role"] == "user"
    assert user["content"][0] == {"type": "image", "image": str(record.images[0])}
    assert user["content"][1] == {
        "type": "text",
        "text": "Facing the window, which object is closest to your right hand?\n"
        "A. the lamp\nB. the chair\nC. the plant\nD. the table",
    }


def test_ours_mindcube_images_in_order_and_no_duplicate_options(fixture_set: FixtureSet):
    record = load_benchmark("mindcube", fixture_set.mindcube)[1]
    content = build_messages(record)[1]["content"]
    assert [item["image"] for item in content[:-1]] == [str(p) for p in record.images]
    assert [Path(item["image"]).name for item in content[:-1]] == ["front.png", "left.png", "back.png", "right.png"]
    assert content[-1]["text"] == record.question  # the options are already inline
    assert question_text(record).count("A. ") == 1


def test_ours_embedded_image_is_passed_as_object():
    image = Image.new("RGB", (4, 4))
    record = QuestionRecord("1", [image], "Q?", ["x", "y"], "A", "spatialab", "Orientation")
    assert build_messages(record)[1]["content"][0] == {"type": "image", "image": image}


def test_official_spatialab_stand_in(fixture_set: FixtureSet):
    record = load_benchmark("spatialab", fixture_set.spatialab / "spatialab.jsonl")[0]
    text = build_messages(record, "official")[0]["content"][-1]["text"]
    assert text.startswith("Which box holds the most?\nA. box 1\nB. box 2\nC. box 3\nD. box 4\n")
    assert "Answer: X" in text


def test_unknown_protocol(fixture_set: FixtureSet):
    record = load_benchmark("omnispatial", fixture_set.omnispatial)[0]
    with pytest.raises(ValueError, match="protocol"):
        build_messages(record, "robust")
