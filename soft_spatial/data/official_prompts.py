"""The benchmarks' published prompt texts, reproduced verbatim for the ``official`` protocol.

These strings are data, not design: they must match the benchmarks' own evaluation code
character for character (double spaces, Unicode dashes and quotes included), because reference
numbers move with the prompt. Sources: OmniSpatial ``vlms_eval/system_prompts.py`` and MindCube
``src/prompt_generation/templates.py`` (see docs/notes/benchmarks.md §1.2 and §2.2).
"""

from __future__ import annotations

# --- OmniSpatial: system prompts by --prompt_type ---------------------------------------------

_OMNI_HEADER = (
    "\nYou are a spatial-reasoning assistant.\n\nTask\n-----\nYou will receive  \n"
)
_OMNI_FOOTER = (
    "Always ground your answer in the visual evidence; do not hallucinate unseen objects.\n"
    "If uncertain, pick the most plausible option\u2014never refuse or reply "
    "\u201cinsufficient information.\u201d\n"
)
_OMNI_QUESTION = "**Question** - a natural-language query about spatial relationships between objects in the image."
_OMNI_OPTIONS = "3. **Options** - \u22652 answer candidates, each tagged by a capital letter (A, B, C, D\u2026).\n"
_OMNI_IMAGE = "1. **Image** - a single RGB frame depicting a scene."

OMNISPATIAL_SYSTEM_PROMPTS: dict[str, str] = {
    "none": (
        _OMNI_HEADER
        + f"{_OMNI_IMAGE}  \n2. {_OMNI_QUESTION}  \n{_OMNI_OPTIONS}\n"
        + "Based on the image and question, provide your answer.\n"
        + _OMNI_FOOTER
    ),
    "zeroshot_cot": (
        _OMNI_HEADER
        + f"{_OMNI_IMAGE}\n2. {_OMNI_QUESTION}\n{_OMNI_OPTIONS}\n"
        + "Think step by step and provide the answer.\n"
        + _OMNI_FOOTER
    ),
    "manual_cot": (
        _OMNI_HEADER
        + f"{_OMNI_IMAGE}  \n2. {_OMNI_QUESTION}  \n{_OMNI_OPTIONS}\n"
        + "Guidelines\n----------\n"
        + "Please follow these steps to analyze the image and answer the question:\n"
        + "1. First, carefully observe the image and identify all relevant objects and their spatial relationships.\n"
        + "2. Next, break down the question into key components that need to be addressed.\n"
        + "3. Think through the spatial reasoning step-by-step to arrive at your answer. "
        + "It may be necessary to transfer perspective to better understand the scene.\n"
        + "4. Finally, select the most appropriate option (A, B, C, or D) based on your analysis.\n\n"
        + _OMNI_FOOTER
    ),
}

# --- OmniSpatial: answer-format prompts by --eval_type (the LLM-judge type is not supported) ----

OMNISPATIAL_FORMAT_PROMPTS: dict[str, str] = {
    "re": "\nEnd your answer with a separate line formatted exactly as:\n\nAnswer: X\nwhere X \u2208 {A, B, C, D}.\n",
    "json": (
        "\nYou need to respond with the answer in JSON format:\n\n```json\n{\n"
        '    "analysis": "The analysis of the image and question",\n'
        '    "answer": "A"\n}\n```\n'
    ),
    "direct": (
        "\nNote: You only need to respond with A, B, C, or D without providing any additional information.\n"
    ),
}

# --- MindCube: raw-QA instruction ----------------------------------------------------------------

MINDCUBE_RAW_QA_INSTRUCTION = (
    "[Task]\n"
    "Your task is to analyze the spatial arrangement of objects in the scene by examining the provided "
    "images, which show the scene from different viewpoints.\n"
    "[Answer Instruction]\n"
    "You only need to provide *ONE* correct answer selecting from the options listed below. For example, "
    "if you think the correct answer is 'A. Above' from 'A. Above B. Under C. Front D. Behind', your "
    "response should **only** be '<answer>A. Above</answer>'.\n"
)
MINDCUBE_QUESTION_HEADER = "[Question]\n"
