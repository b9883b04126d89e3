"""Position ids for cached decoding with `inputs_embeds` (soft thinking).

A soft step feeds an embedding mixture, not a token, so the model only sees `inputs_embeds`. In that
case transformers 5.x infers wrong M-RoPE positions for left-padded rows, or crashes when the full
attention mask is passed (see docs/notes/cpu-environment.md §4). The engines therefore pass explicit
positions:

* prefill: `prefill_position_ids(model, input_ids, attention_mask, ...)` returns `(position_ids,
  rope_deltas)`, from the model's own `get_rope_index` for Qwen3-VL / Qwen2.5-VL (M-RoPE, shape
  (3, B, L)) and from the attention mask for text-only causal LMs (shape (B, L), deltas 0);
* each later step: append the new column(s) to the attention mask, then
  `decode_position_ids(attention_mask, rope_deltas, mrope)`; the position of a new token is
  (number of real tokens up to and including it) - 1 + rope_deltas, the formula HF `generate` uses.
"""

from __future__ import annotations

import torch


def rope_index_owner(model):
    """The module of `model` that defines `get_rope_index` (M-RoPE models), or None (1-D RoPE)."""
    for candidate in (model, getattr(model, "model", None)):
        if candidate is not None and callable(getattr(candidate, "get_rope_index", None)):
            return candidate
    return None


def is_mrope(model) -> bool:
    """Whether `model` uses multimodal 3-D RoPE (Qwen2-VL family): positions of shape (3, B, L)."""
    return rope_index_owner(model) is not None


def mm_token_types(input_ids: torch.Tensor, config) -> torch.Tensor:
    """Token types as the processor returns them: 0 text, 1 image token, 2 video token."""
    types = torch.zeros_like(input_ids, dtype=torch.int32)
    types[input_ids == config.image_token_id] = 1
    types[input_ids == config.video_token_id] = 2
    return types


def text_position_ids(attention_mask: torch.Tensor) -> torch.Tensor:
    """1-D positions of a left-padded batch: cumsum(mask) - 1 on real tokens, 1 on padding (B, L)."""
    mask = attention_mask.long()
    return (mask.cumsum(-1) - 1).clamp(min=0).masked_fill(mask == 0, 1)


def prefill_position_ids(
    model,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None = None,
    *,
    image_grid_thw: torch.Tensor | None = None,
    video_grid_thw: torch.Tensor | None = None,
    mm_token_type_ids: torch.Tensor | None = None,
    second_per_grid_ts: torch.Tensor | None = None,
    **_ignored,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Position ids and rope deltas for the prompt of a (left-padded) batch.

    Returns `(position_ids, rope_deltas)`: (3, B, L) and (B, 1) for M-RoPE models, using the model's
    `get_rope_index` (`mm_token_type_ids` is derived from the image/video token ids when not
    given); (B, L) and zeros (B, 1) for text-only models. Extra keyword arguments (such as
    `pixel_values`) are accepted and ignored, so a processor output can be splatted in.
    """
    if attention_mask is None:
        attention_mask = torch.ones_like(input_ids)
    if attention_mask.shape != input_ids.shape:
        shapes = f"{tuple(attention_mask.shape)} vs {tuple(input_ids.shape)}"
        raise ValueError(f"attention_mask and input_ids differ in shape: {shapes}")
    owner = rope_index_owner(model)
    if owner is None:
        deltas = torch.zeros(input_ids.shape[0], 1, dtype=torch.long, device=input_ids.device)
        return text_position_ids(attention_mask), deltas
    if mm_token_type_ids is None:
        mm_token_type_ids = mm_token_types(input_ids, owner.config)
    kwargs = dict(image_grid_thw=image_grid_thw, video_grid_thw=video_grid_thw, attention_mask=attention_mask)
    if second_per_grid_ts is not None:
        kwargs["second_per_grid_ts"] = second_per_grid_ts
    position_ids, deltas = owner.get_rope_index(input_ids, mm_token_type_ids, **kwargs)
    return position_ids, deltas.reshape(-1, 1).long()


def decode_position_ids(
    attention_mask: torch.Tensor, rope_deltas: torch.Tensor | None, mrope: bool, num_new: int = 1
) -> torch.Tensor:
    """Positions of the last `num_new` columns of `attention_mask` (already extended with them).

    pos = cumsum(attention_mask)[:, -num_new:] - 1 + rope_deltas; for one new token this is
    attention_mask.sum(-1) - 1 + rope_deltas. Shape (3, B, num_new) if `mrope` else (B, num_new).
    The new tokens are text (soft or discrete steps), so all three M-RoPE rows are equal.
    """
    if num_new < 1 or num_new > attention_mask.shape[-1]:
        raise ValueError(f"num_new={num_new} must be in 1..{attention_mask.shape[-1]} (mask columns)")
    pos = attention_mask.long().cumsum(-1)[:, -num_new:] - 1
    if rope_deltas is not None:
        pos = pos + rope_deltas.reshape(-1, 1).to(pos)
    if mrope:
        return pos.unsqueeze(0).expand(3, -1, -1)
    return pos
