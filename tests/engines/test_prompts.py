"""One rendering of chat prompts for every engine (:mod:`soft_spatial.engines.prompts`), on the tiny
Qwen3-VL's own processor: each image becomes one run of placeholders as long as its patch grid
(merged), in the chat's order; the images come back as RGB; a text-only model renders with its
tokenizer and refuses images; every mismatch between images and placeholders, a missing or
unreadable image is an error naming the prompt. (The engines on rendered prompts:
tests/engines/test_local.py, tests/sglang_real/test_eval_engine.py.)"""
from __future__ import annotations

import itertools

import pytest
from PIL import Image

from soft_spatial.engines.prompts import chat_images, load_image, render_chat
from soft_spatial.models.loading import load_processing


@pytest.fixture(scope="module")
def vl(tiny_qwen3_vl_small):
    config, processor, tokenizer = load_processing(tiny_qwen3_vl_small)
    return config, processor, tokenizer


def _chat(*images, text="Which side is red?"):
    """A user turn per image (an assistant answer between them), each image then a question."""
    turns = []
    for i, img in enumerate(images):
        if turns:
            turns.append({"role": "assistant", "content": "yes"})
        turns.append({"role": "user", "content": [{"type": "image", "image": img},
                                                  {"type": "text", "text": f"{text} {i}"}]})
    return turns


def test_each_image_is_one_run_of_placeholders_as_long_as_its_merged_patch_grid(vl):
    config, processor, tokenizer = vl
    a, b = Image.new("RGB", (64, 96), (200, 30, 30)), Image.new("L", (128, 64), 7)
    ids, images, tensors = render_chat(_chat(a, b), 0, tokenizer, processor, config.image_token_id)
    runs = [len(list(g)) for tok, g in itertools.groupby(ids) if tok == config.image_token_id]
    merge = processor.image_processor.merge_size
    grids = tensors["image_grid_thw"].tolist()
    assert runs == [t * h * w // merge ** 2 for t, h, w in grids] and len(runs) == 2
    assert grids[0][1:] != grids[1][1:]  # the two images differ in shape: the order is checked
    assert [im.size for im in images] == [a.size, b.size] and {im.mode for im in images} == {"RGB"}
    assert "input_ids" not in tensors and "attention_mask" not in tensors
    assert tensors["pixel_values"].shape[0] == sum(t * h * w for t, h, w in grids)
    assert tokenizer.decode(ids).endswith("<|im_start|>assistant\n<think>\n")  # the generation prompt


def test_a_text_only_chat_renders_with_the_tokenizer_and_refuses_images(vl):
    _, _, tokenizer = vl
    chat = [{"role": "user", "content": "Which side is red? A. left B. right"}]
    ids, images, tensors = render_chat(chat, 0, tokenizer)
    assert images == [] and tensors == {}
    assert tokenizer.decode(ids).endswith("A. left B. right<|im_end|>\n<|im_start|>assistant\n<think>\n")
    with pytest.raises(ValueError, match="prompt 4 has images but tiny is a text-only model"):
        render_chat(_chat(Image.new("RGB", (8, 8))), 4, tokenizer, name="tiny")


def test_images_and_placeholders_must_come_together(vl):
    config, processor, tokenizer = vl
    img = Image.new("RGB", (64, 64))
    with pytest.raises(ValueError, match=r"prompt 2: 1 image\(s\) given but the rendered prompt has no image "
                                         r"placeholder"):
        render_chat(_chat(img), 2, tokenizer, processor, image_token_id=-1)  # an id no prompt holds
    text_id = tokenizer("red").input_ids[0]  # a chat without images whose text holds "the placeholder"
    with pytest.raises(ValueError, match="prompt 3: the prompt has image placeholders but no image"):
        render_chat([{"role": "user", "content": "red"}], 3, tokenizer, processor, image_token_id=text_id)


def test_images_load_from_files_in_order_as_rgb(tmp_path):
    rgba = Image.new("RGBA", (5, 3), (10, 20, 30, 128))
    rgba.putpixel((4, 2), (250, 0, 9, 255))
    rgba.save(tmp_path / "a.png")
    loaded = load_image(tmp_path / "a.png", 0)
    assert loaded.mode == "RGB" and loaded.tobytes() == rgba.convert("RGB").tobytes()
    assert load_image(str(tmp_path / "a.png"), 0).tobytes() == loaded.tobytes()
    grey = Image.new("L", (2, 2), 200)
    chat = [{"role": "system", "content": "plain text is skipped"},
            {"role": "user", "content": [{"type": "text", "text": "x"}, {"type": "image", "image": grey},
                                         {"type": "image", "image": tmp_path / "a.png"}]}]
    first, second = chat_images(chat, 0)
    assert first.tobytes() == grey.convert("RGB").tobytes() and second.tobytes() == loaded.tobytes()
    assert chat_images([{"role": "user", "content": "no images"}], 0) == []


def test_a_missing_or_unreadable_image_is_named_with_its_prompt(tmp_path):
    with pytest.raises(FileNotFoundError, match=f"prompt 7: image file '{tmp_path / 'gone.png'}' does not exist"):
        load_image(tmp_path / "gone.png", 7)
    with pytest.raises(TypeError, match="prompt 1: unsupported image value of type bytes"):
        load_image(b"\x89PNG", 1)
    with pytest.raises(ValueError, match="prompt 5: an image item has no 'image' value"):
        chat_images([{"role": "user", "content": [{"type": "image"}]}], 5)
