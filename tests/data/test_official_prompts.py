"""The benchmarks' published prompts (`soft_spatial.data.official_prompts`), as the official
protocol sends them: compared character for character with the texts written out here from the
benchmarks' own code, independently of how the module composes them."""

from __future__ import annotations

import pytest

from soft_spatial.data import build_messages, load_benchmark
from soft_spatial.data.fixtures import FixtureSet
from soft_spatial.data.official_prompts import OMNISPATIAL_FORMAT_PROMPTS, OMNISPATIAL_SYSTEM_PROMPTS
from soft_spatial.data.prompt import official_text

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


def test_official_omnispatial_verbatim(fixture_set: FixtureSet):
    record = load_benchmark("omnispatial", fixture_set.omnispatial)[0]
    messages = build_messages(record, "official")
    assert len(messages) == 1 and messages[0]["role"] == "user"  # no system message
    content = messages[0]["content"]
    assert content[0]["type"] == "image" and content[1]["type"] == "text"  # image first
    assert content[1]["text"] == OMNI_MANUAL_COT_RE


def test_official_omnispatial_variants(fixture_set: FixtureSet):
    record = load_benchmark("omnispatial", fixture_set.omnispatial)[0]
    text = official_text(record, prompt_type="zeroshot_cot", eval_type="direct")
    assert text.startswith(OMNISPATIAL_SYSTEM_PROMPTS["zeroshot_cot"] + "\n" + OMNISPATIAL_FORMAT_PROMPTS["direct"])
    assert "Think step by step and provide the answer." in text
    assert "scene.\n2. **Question**" in text  # zeroshot_cot has no trailing double spaces there
    assert "Based on the image and question" in official_text(record, prompt_type="none")
    with pytest.raises(ValueError, match="eval_type"):
        official_text(record, eval_type="llm")


def test_official_mindcube_raw_qa(fixture_set: FixtureSet):
    record = load_benchmark("mindcube", fixture_set.mindcube)[2]
    content = build_messages(record, "official")[0]["content"]
    assert [c["type"] for c in content] == ["image", "image", "image", "text"]
    assert content[-1]["text"] == MINDCUBE_RAW_QA + record.question
