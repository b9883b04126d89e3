"""Chat messages: our protocol and each benchmark's official prompt."""

from __future__ import annotations

from pathlib import Path

import pytest
from PIL import Image

from soft_spatial.data import SYSTEM_PROMPT, QuestionRecord, build_messages, load_benchmark
from soft_spatial.data.fixtures import FixtureSet, write_fixtures
from soft_spatial.data.official_prompts import OMNISPATIAL_FORMAT_PROMPTS, OMNISPATIAL_SYSTEM_PROMPTS
from soft_spatial.data.prompt import official_text, question_text

# The published OmniSpatial manual_cot + re prompt for a 2-option question, written out in full
# (independently of how official_prompts.py composes it).
OMNI_MANUAL_COT_RE = (
    "\nYou are a spatial-reasoning assistant.\n\nTask\n-----\nYou will receive  \n"
    "1. **Image** - a single RGB frame depicting a scene.  \n"
    "2. **Question** - a natural-language query about spatial relationships between objects in the image.  \n"
    "3. **Options** - ≥2 answer candidates, each tagged by a capital letter (A, B, C, D…).\n\n"
    "Guidelines\n----------\n"
    "Please follow these steps to analyze the image and answer the question:\n"
    "1. First, carefully observe the image and identify all relevant objects and their spatial relationships.\n"
    "2. Next, break down the question into key components that need to be addressed.\n"
    "3. Think through the spatial reasoning step-by-step to arrive at your answer. It may be necessary to "
    "transfer perspective to better understand the scene.\n"
    "4. Finally, select the most appropriate option (A, B, C, or D) based on your analysis.\n\n"
    "Always ground your answer in the visual evidence; do not hallucinate unseen objects.\n"
    "If uncertain, pick the most plausible option—never refuse or reply “insufficient information.”\n"
    "\n"
    "\nEnd your answer with a separate line formatted exactly as:\n\nAnswer: X\nwhere X ∈ {A, B, C, D}.\n"
    "\n\n"
    "From the camera, is the lamp left or right of the sofa?\nA. left\nB. right"
)

MINDCUBE_RAW_QA = (
    "[Task]\nYour task is to analyze the spatial arrangement of objects in the scene by examining the provided "
    "images, which show the scene from different viewpoints.\n[Answer Instruction]\nYou only need to provide "
    "*ONE* correct answer selecting from the options listed below. For example, if you think the correct answer "
    "is 'A. Above' from 'A. Above B. Under C. Front D. Behind', your response should **only** be "
    "'<answer>A. Above</answer>'.\n\n[Question]\n"
)


@pytest.fixture(scope="module")
def fx(tmp_path_factory) -> FixtureSet:
    return write_fixtures(tmp_path_factory.mktemp("prompt-fixtures"))


def test_system_prompt_says_what_the_reward_checks():
    assert "<think>" in SYSTEM_PROMPT and "</think> exactly once" in SYSTEM_PROMPT
    assert "single capital letter" in SYSTEM_PROMPT


def test_ours_omnispatial(fx: FixtureSet):
    record = load_benchmark("omnispatial", fx.omnispatial)[1]
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


def test_ours_mindcube_images_in_order_and_no_duplicate_options(fx: FixtureSet):
    record = load_benchmark("mindcube", fx.mindcube)[1]
    content = build_messages(record)[1]["content"]
    assert [item["image"] for item in content[:-1]] == [str(p) for p in record.images]
    assert [Path(item["image"]).name for item in content[:-1]] == ["front.png", "left.png", "back.png", "right.png"]
    assert content[-1]["text"] == record.question  # the options are already inline
    assert question_text(record).count("A. ") == 1


def test_ours_embedded_image_is_passed_as_object():
    image = Image.new("RGB", (4, 4))
    record = QuestionRecord("1", [image], "Q?", ["x", "y"], "A", "spatialab", "Orientation")
    assert build_messages(record)[1]["content"][0] == {"type": "image", "image": image}


def test_official_omnispatial_verbatim(fx: FixtureSet):
    record = load_benchmark("omnispatial", fx.omnispatial)[0]
    messages = build_messages(record, "official")
    assert len(messages) == 1 and messages[0]["role"] == "user"  # no system message
    content = messages[0]["content"]
    assert content[0]["type"] == "image" and content[1]["type"] == "text"  # image first
    assert content[1]["text"] == OMNI_MANUAL_COT_RE


def test_official_omnispatial_variants(fx: FixtureSet):
    record = load_benchmark("omnispatial", fx.omnispatial)[0]
    text = official_text(record, prompt_type="zeroshot_cot", eval_type="direct")
    assert text.startswith(OMNISPATIAL_SYSTEM_PROMPTS["zeroshot_cot"] + "\n" + OMNISPATIAL_FORMAT_PROMPTS["direct"])
    assert "Think step by step and provide the answer." in text
    assert "scene.\n2. **Question**" in text  # zeroshot_cot has no trailing double spaces there
    assert "Based on the image and question" in official_text(record, prompt_type="none")
    with pytest.raises(ValueError, match="eval_type"):
        official_text(record, eval_type="llm")


def test_official_mindcube_raw_qa(fx: FixtureSet):
    record = load_benchmark("mindcube", fx.mindcube)[2]
    content = build_messages(record, "official")[0]["content"]
    assert [c["type"] for c in content] == ["image", "image", "image", "text"]
    assert content[-1]["text"] == MINDCUBE_RAW_QA + record.question


def test_official_spatialab_stand_in(fx: FixtureSet):
    record = load_benchmark("spatialab", fx.spatialab / "spatialab.jsonl")[0]
    text = build_messages(record, "official")[0]["content"][-1]["text"]
    assert text.startswith("Which box holds the most?\nA. box 1\nB. box 2\nC. box 3\nD. box 4\n")
    assert "Answer: X" in text


def test_unknown_protocol(fx: FixtureSet):
    record = load_benchmark("omnispatial", fx.omnispatial)[0]
    with pytest.raises(ValueError, match="protocol"):
        build_messages(record, "robust")
