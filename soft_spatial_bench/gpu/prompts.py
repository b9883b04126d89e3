"""The GPU kit's prompts: image chat prompts (parity) and token-id text prompts (throughput)."""
from __future__ import annotations

__all__ = ["image_prompts", "text_prompts"]


def image_prompts(n: int, side: int) -> list:
    """``n`` chat prompts, each one ``side``×``side`` synthetic image and a spatial question."""
    from PIL import Image
    out = []
    for i in range(n):
        img = Image.new("RGB", (side, side), (40 * i % 255, 90, 200 - 20 * i % 200))
        for x in range(0, side, 8):  # some structure, so images differ beyond their colour
            img.putpixel((x, (x * (i + 3)) % side), (255, 255, 255))
        out.append([{"role": "user", "content": [
            {"type": "image", "image": img},
            {"type": "text", "text": f"Question {i}: is the red cube left of the chair? "
                                     f"A. yes B. no C. cannot tell D. both"}]}])
    return out


def text_prompts(tokenizer, n: int, words: int) -> list[list[int]]:
    """``n`` token-id prompts of about ``5 * words`` tokens each."""
    return [tokenizer(f"Question {i}: " + " ".join(["where is the red cube"] * words)).input_ids
            for i in range(n)]
