"""The GPU kit's prompts (soft_spatial_bench/gpu/prompts.py): image chats, one synthetic image each,
all different and the same on every call (so every engine of a comparison sees the same inputs);
text prompts of the asked length as the model's tokenizer encodes them."""
from __future__ import annotations

from soft_spatial_bench.gpu.prompts import image_prompts, text_prompts


def test_image_prompts_differ_from_each_other_and_repeat_exactly():
    chats = image_prompts(4, 32)
    again = image_prompts(4, 32)
    images = []
    for i, (chat, same) in enumerate(zip(chats, again)):
        (turn,) = chat
        image, text = turn["content"]
        assert turn["role"] == "user" and image["type"] == "image" and text["type"] == "text"
        assert image["image"].size == (32, 32) and image["image"].mode == "RGB"
        assert text["text"].startswith(f"Question {i}: ") and "A. yes B. no" in text["text"]
        assert image["image"].tobytes() == same[0]["content"][0]["image"].tobytes()
        images.append(image["image"].tobytes())
    assert len(set(images)) == 4


def test_text_prompts_are_the_questions_as_the_tokenizer_encodes_them():
    from soft_spatial.models.tiny import build_tokenizer

    tokenizer = build_tokenizer("small")
    short, long = text_prompts(tokenizer, 2, 3), text_prompts(tokenizer, 2, 6)
    for i, ids in enumerate(short):
        assert tokenizer.decode(ids) == f"Question {i}: " + " ".join(["where is the red cube"] * 3)
    assert short[0] != short[1] and all(len(b) > len(a) for a, b in zip(short, long))
