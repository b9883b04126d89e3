"""Chat messages for a question: our training/eval prompt, or a benchmark's official prompt.

Protocols:
    ``ours``: our system prompt, then one user turn with the images in order followed by the
        question and its lettered options. The same text is baked into the training parquet.
    ``official``: the benchmark's published prompt, no system message, images first:
        OmniSpatial ``SYS_PROMPT + "\\n" + FORMAT_PROMPT + "\\n\\n" + question + "\\nA. ..."`` (local-model
        variant, default manual_cot + re); MindCube raw-QA ``instruction + "\\n[Question]\\n" +
        question``. SpatiaLab publishes no prompt; its ``official`` is our stand-in: question,
        lettered options and OmniSpatial's ``Answer: X`` format line
        (docs/notes/benchmarks.md §3.2).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from PIL import Image

from soft_spatial.data.official_prompts import (
    MINDCUBE_QUESTION_HEADER,
    MINDCUBE_RAW_QA_INSTRUCTION,
    OMNISPATIAL_FORMAT_PROMPTS,
    OMNISPATIAL_SYSTEM_PROMPTS,
)
from soft_spatial.data.record import ImageRef, QuestionRecord

PROTOCOLS = ("ours", "official")

SYSTEM_PROMPT = (
    "You answer multiple-choice questions about the spatial layout of what the images show: where "
    "things are, how they face and move, and how the scene looks from another viewpoint. The options "
    "follow the question, each labelled with a capital letter; if they are not written out, read them "
    "from the image.\n"
    "First think it through step by step inside the <think> block, looking closely at the images. "
    "Close the block with </think> exactly once. After </think>, write only the letter of the option "
    "you choose, as a single capital letter (for example: B), and nothing else.\n"
    "Do not refuse. If you are unsure, pick the option the images support best."
)

Message = dict[str, Any]


def lettered_options(options: list[str]) -> str:
    """``"A. x\\nB. y"``: one line per option."""
    return "\n".join(f"{chr(65 + i)}. {text}" for i, text in enumerate(options))


def question_text(record: QuestionRecord) -> str:
    """Our user text: the question, then its lettered options unless the question already lists them."""
    if record.options_inline:
        return record.question
    return f"{record.question}\n{lettered_options(record.options)}"


def image_item(image: ImageRef) -> dict[str, Any]:
    """A chat content item for one image (a path as a string, or the image object itself)."""
    if isinstance(image, Image.Image):
        return {"type": "image", "image": image}
    return {"type": "image", "image": str(Path(image))}


def official_text(record: QuestionRecord, *, prompt_type: str = "manual_cot", eval_type: str = "re") -> str:
    """The benchmark's official user text (see the module docstring)."""
    if record.benchmark == "omnispatial":
        if prompt_type not in OMNISPATIAL_SYSTEM_PROMPTS:
            choices = list(OMNISPATIAL_SYSTEM_PROMPTS)
            raise ValueError(f"unknown OmniSpatial prompt_type {prompt_type!r}; use one of {choices}")
        if eval_type not in OMNISPATIAL_FORMAT_PROMPTS:
            choices = list(OMNISPATIAL_FORMAT_PROMPTS)
            raise ValueError(f"unknown OmniSpatial eval_type {eval_type!r}; use one of {choices}")
        text = OMNISPATIAL_SYSTEM_PROMPTS[prompt_type] + "\n" + OMNISPATIAL_FORMAT_PROMPTS[eval_type] + "\n\n"
        return text + record.question + "".join(f"\n{chr(65 + i)}. {o}" for i, o in enumerate(record.options))
    if record.benchmark == "mindcube":
        return MINDCUBE_RAW_QA_INSTRUCTION + "\n" + MINDCUBE_QUESTION_HEADER + record.question
    if record.benchmark == "spatialab":
        return f"{question_text(record)}\n{OMNISPATIAL_FORMAT_PROMPTS['re']}"
    raise ValueError(f"no official prompt for benchmark {record.benchmark!r}")


def build_messages(record: QuestionRecord, protocol: str = "ours", **official_kwargs: str) -> list[Message]:
    """Chat messages for ``record``: images (in order) before the text in one user turn.

    ``official_kwargs`` (``prompt_type``, ``eval_type``) select OmniSpatial's official variants.
    """
    images = [image_item(image) for image in record.images]
    if protocol == "ours":
        user = images + [{"type": "text", "text": question_text(record)}]
        return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}]
    if protocol == "official":
        user = images + [{"type": "text", "text": official_text(record, **official_kwargs)}]
        return [{"role": "user", "content": user}]
    raise ValueError(f"unknown protocol {protocol!r}; expected one of {PROTOCOLS}")
