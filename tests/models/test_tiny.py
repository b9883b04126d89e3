"""Tiny model factory (soft_spatial.models.tiny): configs, tokenizers, weights and the model families."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from PIL import Image

from soft_spatial.models import (
    QWEN_ADDED_TOKENS,
    build_tiny_model,
    load_model,
    think_end_id,
    think_start_id,
)
from soft_spatial.models import tiny

VL_FIXTURES = ["tiny_qwen3_vl", "tiny_qwen3_vl_small", "tiny_qwen2_5_vl"]
PROCESSOR_CLASS = {"qwen3_vl": "Qwen3VLProcessor", "qwen2_5_vl": "Qwen2_5_VLProcessor"}


def _image(h: int, w: int, seed: int = 0) -> Image.Image:
    return Image.fromarray(np.random.default_rng(seed).integers(0, 255, (h, w, 3), dtype=np.uint8))


@pytest.mark.parametrize("fixture", VL_FIXTURES)
def test_config_ids_match_tokenizer(fixture, request):
    from transformers import AutoConfig, AutoTokenizer, GenerationConfig

    path = request.getfixturevalue(fixture)
    config, tok = AutoConfig.from_pretrained(path), AutoTokenizer.from_pretrained(path)
    ids = tok.convert_tokens_to_ids
    assert config.image_token_id == ids("<|image_pad|>")
    assert config.video_token_id == ids("<|video_pad|>")
    assert config.vision_start_token_id == ids("<|vision_start|>")
    assert config.vision_end_token_id == ids("<|vision_end|>")
    text = config.text_config
    assert (text.eos_token_id, tok.eos_token_id) == (ids("<|im_end|>"),) * 2
    assert (text.pad_token_id, tok.pad_token_id) == (ids("<|endoftext|>"),) * 2
    assert text.bos_token_id == tok.pad_token_id
    assert GenerationConfig.from_pretrained(path).eos_token_id == [ids("<|im_end|>"), ids("<|endoftext|>")]
    assert text.vocab_size >= len(tok)
    if len(tok) > 150000:  # the real vocabulary keeps the released ids and size
        assert (text.vocab_size, config.image_token_id, ids("</think>")) == (151936, 151655, 151668)
    else:
        assert text.vocab_size == math.ceil(len(tok) / 64) * 64


@pytest.mark.parametrize("fixture", ["tiny_qwen3_vl_small", "tiny_qwen2_5_vl"])
def test_loads_with_auto_classes_and_verl(fixture, request):
    from transformers import AutoConfig, AutoModelForImageTextToText, AutoProcessor, AutoTokenizer
    from verl.utils import hf_processor, hf_tokenizer

    path = request.getfixturevalue(fixture)
    family = AutoConfig.from_pretrained(path).model_type
    model = AutoModelForImageTextToText.from_pretrained(path)
    assert model.config._attn_implementation == "sdpa"
    processor = AutoProcessor.from_pretrained(path)
    assert type(processor).__name__ == PROCESSOR_CLASS[family]
    assert processor.image_processor is not None and processor.video_processor is not None
    tokenizer = AutoTokenizer.from_pretrained(path)
    assert tokenizer.get_vocab() == processor.tokenizer.get_vocab()
    assert tokenizer.chat_template == processor.chat_template == tiny.CHAT_TEMPLATE
    verl_processor = hf_processor(str(path))
    assert type(verl_processor).__name__ == PROCESSOR_CLASS[family]  # a real processor, not None
    assert callable(verl_processor.get_rope_index)
    assert hf_tokenizer(str(path)).pad_token == "<|endoftext|>"


def test_chat_template_and_image_expansion(tiny_qwen3_vl_small):
    _, processor, tok = load_model(tiny_qwen3_vl_small)
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Which is left?"}]},
        {"role": "assistant", "content": "B", "reasoning_content": "\nthe lamp\n"},
        {"role": "user", "content": "Sure?"},
    ]
    text = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert text == (
        "<|im_start|>system\nBe brief.<|im_end|>\n"
        "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>Which is left?<|im_end|>\n"
        "<|im_start|>assistant\n<think>\nthe lamp\n</think>\n\nB<|im_end|>\n"
        "<|im_start|>user\nSure?<|im_end|>\n"
        "<|im_start|>assistant\n<think>\n"
    )
    assert processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False) == text
    assert not tok.apply_chat_template(messages[:2], tokenize=False).endswith("<think>\n")

    inputs = processor(text=[text], images=[_image(64, 96)], return_tensors="pt")
    grid = inputs["image_grid_thw"][0]
    n_image = int((inputs["input_ids"] == tok.convert_tokens_to_ids("<|image_pad|>")).sum())
    assert n_image == int(grid.prod()) // 4 == int(inputs["pixel_values"].shape[0]) // 4
    assert tok.decode(inputs["input_ids"][0]).replace("<|image_pad|>" * n_image, "<|image_pad|>") == text


@pytest.mark.parametrize("fixture", ["tiny_qwen3_vl_small", "tiny_qwen2_5_vl"])
def test_image_and_video_forward(fixture, request):
    model, processor, tok = load_model(request.getfixturevalue(fixture))
    image_msg = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Where?"}]}]
    video_msg = [{"role": "user", "content": [{"type": "video"}, {"type": "text", "text": "What moves?"}]}]
    video = np.random.default_rng(1).integers(0, 255, (4, 64, 64, 3), dtype=np.uint8)
    with torch.no_grad():
        for messages, media in ((image_msg, {"images": [_image(96, 64)]}), (video_msg, {"videos": [video]})):
            text = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
            inputs = processor(text=[text], return_tensors="pt", **media)
            grid = inputs.get("image_grid_thw", inputs.get("video_grid_thw"))
            token_id = model.config.image_token_id if "images" in media else model.config.video_token_id
            assert int((inputs["input_ids"] == token_id).sum()) == int(grid.prod(-1).sum()) // 4
            logits = model(**inputs).logits
            assert logits.shape == (*inputs["input_ids"].shape, model.config.text_config.vocab_size)
            assert torch.isfinite(logits).all()


def test_qwen_vocab_model_generates(tiny_qwen3_vl):
    model, processor, tok = load_model(tiny_qwen3_vl)
    assert len(tok) == 151669 and think_end_id(tok) == 151668
    assert 15e6 < sum(p.numel() for p in model.parameters()) < 25e6
    text = processor.apply_chat_template(
        [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Hello world!"}]}],
        add_generation_prompt=True,
        tokenize=False,
    )
    inputs = processor(text=[text], images=[_image(64, 64)], return_tensors="pt")
    out = model.generate(**inputs, max_new_tokens=4, do_sample=False)
    assert out.shape == (1, inputs["input_ids"].shape[1] + 4)


def test_logits_are_not_degenerate(tiny_qwen3_vl_small):
    """Next-token distributions are peaked but not one-hot, so sampling varies."""
    model, _, tok = load_model(tiny_qwen3_vl_small)
    ids = torch.tensor([tok.encode("Which object is to the left of the red chair? The lamp is closer.")])
    with torch.no_grad():
        probs = model(input_ids=ids).logits[0].softmax(-1)
    top1 = probs.max(-1).values
    assert (top1 > 10 / probs.shape[-1]).all() and (top1 < 0.99).all()
    gen = torch.Generator().manual_seed(0)
    draws = torch.multinomial(probs, 20, replacement=True, generator=gen)
    assert all(len(set(row.tolist())) > 1 for row in draws)
    assert len(set(probs.argmax(-1).tolist())) > probs.shape[0] // 2  # positions disagree


def test_weights_deterministic_per_seed(tiny_qwen3_vl_small, tmp_path):
    from safetensors.torch import load_file

    reference = load_file(tiny_qwen3_vl_small / "model.safetensors")
    again_dir = build_tiny_model(tmp_path / "again", family="qwen3_vl", vocab="small", seed=0)
    again = load_file(again_dir / "model.safetensors")
    assert reference.keys() == again.keys()
    assert all(torch.equal(reference[k], again[k]) for k in reference)

    model, _, tok = load_model(tiny_qwen3_vl_small)
    tiny.init_weights_(model, seed=1)
    changed = dict(model.named_parameters())
    assert not torch.equal(changed["lm_head.weight"], reference["lm_head.weight"])


def test_small_vocab_tokenizer():
    tok = tiny.build_tokenizer("small")
    assert len(tok) == tiny.SMALL_BPE_SIZE + len(QWEN_ADDED_TOKENS)
    for i, (text, special) in enumerate(QWEN_ADDED_TOKENS):
        assert tok.convert_tokens_to_ids(text) == tiny.SMALL_BPE_SIZE + i
        assert tok.added_tokens_decoder[tiny.SMALL_BPE_SIZE + i].special == special
    sentence = "Is the blue box left of the chair? Zebra 42 ünïcode!"
    assert tok.decode(tok.encode(sentence)) == sentence
    assert think_start_id(tok) == tiny.SMALL_BPE_SIZE + 24 and think_end_id(tok) == tiny.SMALL_BPE_SIZE + 25
    ids = tok.encode("<think>\nA\n</think>\n\nB<|im_end|>")
    assert tok.decode(ids, skip_special_tokens=True) == "<think>\nA\n</think>\n\nB"
    assert tiny.small_tokenizer_backend().to_str() == tiny.small_tokenizer_backend().to_str()


def test_config_overrides():
    tok = tiny.build_tokenizer("small")
    config = tiny.tiny_config("qwen2_5_vl", tok, num_hidden_layers=3, vision_config={"depth": 2})
    assert config.text_config.num_hidden_layers == 3 and config.vision_config.depth == 2
    with pytest.raises(ValueError, match="not_a_field"):
        tiny.tiny_config("qwen3_vl", tok, not_a_field=1)
    with pytest.raises(ValueError, match="unknown family 'llama'"):
        tiny.tiny_config("llama", tok)


def test_cli_text_family(tmp_path):
    out = tmp_path / "cli"
    tiny.main(["--out", str(out), "--family", "qwen3", "--vocab", "small", "--seed", "3"])
    config = json.loads((out / "config.json").read_text())
    assert config["model_type"] == "qwen3" and config["hidden_size"] == 64
    model, processor, tok = load_model(out)
    assert processor is None and type(model).__name__ == "Qwen3ForCausalLM"
    assert tok.apply_chat_template([{"role": "user", "content": "hi"}], add_generation_prompt=True, tokenize=False) == (
        "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n"
    )


def test_small_vocab_with_a_task_corpus():
    corpus = ["Which hexagonal prism is nearest?\nhexagonal"] * 30
    tok = tiny.build_tokenizer("small", corpus=corpus, vocab_size=600)
    assert len(tok) == 600 + len(QWEN_ADDED_TOKENS)
    assert tok.convert_tokens_to_ids("</think>") == 600 + 25
    assert tok.tokenize(" hexagonal") == ["Ġhexagonal"]  # a corpus word is one token
    assert len(tiny.build_tokenizer("small").tokenize(" hexagonal")) > 1
    with pytest.raises(ValueError, match="small BPE"):
        tiny.build_tiny_model("/nonexistent", vocab="qwen", corpus=corpus)
