"""Explicit position ids for cached decoding with `inputs_embeds` (soft_spatial.models.rope).

Reference: one uncached forward over the whole sequence (prompt embeddings + the fed-back soft
embeddings), with positions from the model's own `get_rope_index` over the extended sequence.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from soft_spatial.models import decode_position_ids, is_mrope, load_model, prefill_position_ids, text_position_ids

STEPS = 4
TOL = 1e-4


def _soft_embedding(logits: torch.Tensor, table: torch.Tensor, k: int = 5) -> torch.Tensor:
    """A soft-thinking input: softmax-weighted mixture of the top-k candidates' embeddings."""
    top = logits.topk(k, dim=-1)
    return (top.values.softmax(-1)[..., None] * table[top.indices]).sum(-2)


def _vl_batch(processor):
    """Two left-padded prompts with images of different sizes."""
    rng = np.random.default_rng(0)
    images = [Image.fromarray(rng.integers(0, 255, shape, dtype=np.uint8)) for shape in ((64, 96, 3), (128, 64, 3))]
    conversations = [
        [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Which object is left?"}]}],
        [
            {"role": "system", "content": "Answer with a letter."},
            {
                "role": "user",
                "content": [{"type": "text", "text": "Look:"}, {"type": "image"}, {"type": "text", "text": "Where?"}],
            },
        ],
    ]
    texts = [processor.apply_chat_template(c, add_generation_prompt=True, tokenize=False) for c in conversations]
    processor.tokenizer.padding_side = "left"
    return processor(text=texts, images=images, padding=True, return_tensors="pt")


def _decode(model, inputs, step_positions):
    """Prefill, then STEPS soft steps fed as `inputs_embeds` with a KV cache.

    `step_positions(attention_mask, rope_deltas, past_len)` gives each step's position ids.
    Returns (logits of the last prompt position and of every step (B, STEPS+1, V), fed embeddings).
    """
    table = model.get_input_embeddings().weight
    positions, deltas = prefill_position_ids(model, **inputs)
    out = model(**inputs, position_ids=positions, use_cache=True)
    mask, cache = inputs["attention_mask"], out.past_key_values
    logits, embeds = [out.logits[:, -1]], []
    for _ in range(STEPS):
        embeds.append(_soft_embedding(logits[-1], table))
        past_len = mask.shape[1]
        mask = torch.cat([mask, mask.new_ones(mask.shape[0], 1)], dim=1)
        out = model(inputs_embeds=embeds[-1][:, None], attention_mask=mask,
                    position_ids=step_positions(mask, deltas, past_len), past_key_values=cache, use_cache=True)
        cache = out.past_key_values
        logits.append(out.logits[:, -1])
    return torch.stack(logits, 1), torch.stack(embeds, 1)


def _reference(model, inputs, embeds):
    """Uncached forward over prompt + fed embeddings, positions from get_rope_index / the mask."""
    ids, mask = inputs["input_ids"], inputs["attention_mask"]
    batch, steps = ids.shape[0], embeds.shape[1]
    filler = torch.full((batch, steps), model.config.get_text_config().pad_token_id)  # any text token
    full_ids = torch.cat([ids, filler], 1)
    full_mask = torch.cat([mask, mask.new_ones(batch, steps)], 1)
    vision = {k: inputs[k] for k in ("pixel_values", "image_grid_thw") if k in inputs}
    positions, _ = prefill_position_ids(model, full_ids, full_mask, image_grid_thw=vision.get("image_grid_thw"))
    full_embeds = torch.cat([model.get_input_embeddings()(ids), embeds], 1)
    out = model(inputs_embeds=full_embeds, attention_mask=full_mask, position_ids=positions, **vision)
    return out.logits[:, ids.shape[1] - 1 :]


@pytest.mark.parametrize("fixture", ["tiny_qwen3_vl_small", "tiny_qwen2_5_vl"])
def test_cached_soft_decoding_matches_full_forward(fixture, request):
    model, processor, _ = load_model(request.getfixturevalue(fixture))
    assert is_mrope(model)
    inputs = _vl_batch(processor)
    grids = inputs["image_grid_thw"]
    assert not torch.equal(grids[0], grids[1]) and (inputs["attention_mask"] == 0).any()  # sizes differ, padded
    with torch.no_grad():
        logits, embeds = _decode(model, inputs, lambda mask, deltas, _: decode_position_ids(mask, deltas, mrope=True))
        reference = _reference(model, inputs, embeds)
        assert (logits - reference).abs().max().item() < TOL

        # Sensitivity: what transformers' no-mask default does (padded length + delta), and 1-D
        # positions that ignore rope_deltas, both give different logits.
        def padded_len(mask, deltas, past_len):
            return (past_len + deltas).view(1, -1, 1).expand(3, -1, 1)

        def no_deltas(mask, deltas, past_len):
            return decode_position_ids(mask, None, mrope=True)

        for naive in (padded_len, no_deltas):
            naive_logits, naive_embeds = _decode(model, inputs, naive)
            assert torch.equal(naive_logits[:, 0], logits[:, 0])  # same prefill
            assert (naive_logits - _reference(model, inputs, naive_embeds)).abs().max().item() > 1e-2


@pytest.mark.parametrize("fixture", ["tiny_qwen3_vl_small", "tiny_qwen2_5_vl"])
def test_prefill_positions_match_transformers(fixture, request):
    """With input_ids, transformers computes M-RoPE positions itself: ours give the same logits and
    the same rope_deltas; a text-only batch gets deltas 0 and mask-based positions."""
    model, processor, tok = load_model(request.getfixturevalue(fixture))
    inputs = _vl_batch(processor)
    with torch.no_grad():
        positions, deltas = prefill_position_ids(model, **inputs)
        model.model.rope_deltas = None
        own = model(**inputs).logits
        assert torch.equal(model.model.rope_deltas, deltas)
        ours = model(**inputs, position_ids=positions).logits
    real = inputs["attention_mask"].bool()
    assert (own - ours)[real].abs().max().item() < 1e-5
    assert positions.shape == (3, *inputs["input_ids"].shape) and deltas.shape == (2, 1)
    assert (deltas < 0).all()  # images take fewer positions than tokens

    text = tok(["short", "a somewhat longer prompt"], padding=True, return_tensors="pt")
    positions, deltas = prefill_position_ids(model, text["input_ids"], text["attention_mask"])
    assert (deltas == 0).all()
    mask = text["attention_mask"].bool()
    expected = text_position_ids(text["attention_mask"])
    assert all(torch.equal(positions[i][mask], expected[mask]) for i in range(3))


def test_text_only_cached_decoding(tiny_qwen3_text_small):
    model, processor, tok = load_model(tiny_qwen3_text_small)
    assert processor is None and not is_mrope(model)
    tok.padding_side = "left"
    inputs = tok(["Which is left?", "You are standing at the door facing north. Turn right."],
                 padding=True, return_tensors="pt")
    assert (inputs["attention_mask"] == 0).any()
    with torch.no_grad():
        logits, embeds = _decode(model, inputs, lambda mask, deltas, _: decode_position_ids(mask, deltas, mrope=False))
        reference = _reference(model, inputs, embeds)
        assert (logits - reference).abs().max().item() < TOL

        def padded_len(mask, deltas, past_len):
            return torch.full((mask.shape[0], 1), past_len)

        naive_logits, naive_embeds = _decode(model, inputs, padded_len)
        assert (naive_logits - _reference(model, inputs, naive_embeds)).abs().max().item() > 1e-2


def test_decode_position_ids_formula():
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1], [0, 1, 1, 0, 1]])
    deltas = torch.tensor([[-3], [2], [0]])
    one = decode_position_ids(mask, deltas, mrope=False)
    assert one.shape == (3, 1)
    assert one[:, 0].tolist() == [3 - 1 - 3, 5 - 1 + 2, 3 - 1 + 0]
    three = decode_position_ids(mask, deltas, mrope=True)
    assert three.shape == (3, 3, 1) and all(torch.equal(three[i], one) for i in range(3))
    last3 = decode_position_ids(mask, deltas, mrope=False, num_new=3)
    assert torch.equal(last3[:, -1:], one)
    assert last3[0].tolist() == [0 - 3, 1 - 3, 2 - 3]
    assert torch.equal(decode_position_ids(mask, None, mrope=False), mask.sum(-1, keepdim=True) - 1)
    with pytest.raises(ValueError, match="num_new"):
        decode_position_ids(mask, deltas, mrope=False, num_new=0)


def test_text_position_ids():
    mask = torch.tensor([[0, 0, 1, 1], [1, 1, 1, 1]])
    assert text_position_ids(mask).tolist() == [[1, 1, 0, 1], [0, 1, 2, 3]]
