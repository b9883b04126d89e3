"""Chat prompts → token ids and images, shared by every engine (one rendering, one set of checks).

A chat is a list of ``{"role", "content"}`` messages whose content may hold
``{"type": "image", "image": PIL.Image | path}`` items. :func:`render_chat` applies the model's chat
template with the generation prompt and, for vision-language models, runs the processor, so the
ids carry the expanded image placeholders (what SGLang and verl's agent loop expect).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any
from collections.abc import Sequence

from torch import Tensor

__all__ = ["load_image", "chat_images", "render_chat"]


def load_image(img, i: int):
    """A PIL image (RGB) from a PIL image or a file path; ``i`` is the prompt index for errors."""
    from PIL import Image
    if isinstance(img, Image.Image):
        return img.convert("RGB")
    if isinstance(img, (str, Path)):
        p = Path(img)
        if not p.is_file():
            raise FileNotFoundError(f"prompt {i}: image file {str(p)!r} does not exist")
        return Image.open(p).convert("RGB")
    raise TypeError(f"prompt {i}: unsupported image value of type {type(img).__name__}")


def chat_images(messages: Sequence[dict[str, Any]], i: int) -> list:
    """The images of a chat, in order."""
    images = []
    for m in messages:
        content = m.get("content")
        for item in content if isinstance(content, list) else []:
            if isinstance(item, dict) and item.get("type") == "image":
                img = item.get("image")
                if img is None:
                    raise ValueError(f"prompt {i}: an image item has no 'image' value")
                images.append(load_image(img, i))
    return images


def render_chat(messages: Sequence[dict[str, Any]], i: int, tokenizer, processor=None,
                image_token_id: int | None = None, name: str = "model"
                ) -> tuple[list[int], list, dict[str, Tensor]]:
    """``(ids, images, processor tensors)`` of chat prompt ``i`` (tensors empty for text-only
    models); checks that images and image placeholders come together."""
    images = chat_images(messages, i)
    if processor is None:
        if images:
            raise ValueError(f"prompt {i} has images but {name} is a text-only model")
        ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
        if hasattr(ids, "keys"):
            ids = ids["input_ids"]
        return list(ids), [], {}
    text = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    enc = processor(text=[text], images=images or None, return_tensors="pt")
    ids = enc["input_ids"][0].tolist()
    n_pad = sum(1 for t in ids if t == image_token_id)
    if images and n_pad == 0:
        raise ValueError(f"prompt {i}: {len(images)} image(s) given but the rendered prompt "
                         f"has no image placeholder")
    if n_pad and not images:
        raise ValueError(f"prompt {i}: the prompt has image placeholders but no image")
    return ids, images, {k: v for k, v in enc.items() if k not in ("input_ids", "attention_mask")}
