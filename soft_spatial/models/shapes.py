"""Self-consistency of a (Qwen3-VL / Qwen2.5-VL / Qwen3) model config built from shape overrides.

Engines disagree on what to do with an inconsistent config: SGLang 0.5.12 silently rescales an
``mrope_section`` whose sum is not ``head_dim // 2`` ("Corrected mrope_section"), transformers
keeps it as given, so the two compute different positions for image tokens and nothing fails
(the GPU kit's stage d once compared such a model: 0/8 rows matched even in hard mode).
:func:`check_config` refuses such a config up front, naming the field, so no engine has anything
to "correct".
"""
from __future__ import annotations

import math


def _get(cfg, name, default=None):
    return cfg.get(name, default) if isinstance(cfg, dict) else getattr(cfg, name, default)


def config_problems(config) -> list[str]:
    """Every inconsistency of ``config`` (a transformers config or its ``to_dict()``), as
    ``"field: what is wrong"``; empty when the config is self-consistent."""
    text = _get(config, "text_config") or config
    vision = _get(config, "vision_config")
    out = []
    hidden, heads = _get(text, "hidden_size"), _get(text, "num_attention_heads")
    kv = _get(text, "num_key_value_heads") or heads
    head_dim = _get(text, "head_dim") or hidden // heads
    if heads % kv:
        out.append(f"num_key_value_heads: {kv} does not divide num_attention_heads {heads}")
    if head_dim % 2:
        out.append(f"head_dim: {head_dim} is odd (rotary pairs need an even head_dim)")
    rope = _get(text, "rope_parameters") or _get(text, "rope_scaling") or {}
    section = rope.get("mrope_section")
    if section is not None:
        half = head_dim // 2
        if len(section) != 3 or min(section) <= 0:
            out.append(f"rope_parameters.mrope_section: {section} needs 3 positive parts (t, h, w)")
        elif sum(section) != half:
            out.append(f"rope_parameters.mrope_section: {section} sums to {sum(section)}, "
                       f"not head_dim // 2 = {half} (head_dim {head_dim})")
        elif rope.get("mrope_interleaved") and 3 * max(section[1:]) > half:
            # interleaved layout: h and w take every third frequency up to 3 * their section
            out.append(f"rope_parameters.mrope_section: {section} interleaved needs "
                       f"3 * max(h, w) <= head_dim // 2 = {half}")
    if vision is not None:
        depth, v_heads = _get(vision, "depth"), _get(vision, "num_heads")
        v_hidden, v_out = _get(vision, "hidden_size"), _get(vision, "out_hidden_size")
        if v_out is not None and v_out != hidden:
            out.append(f"vision_config.out_hidden_size: {v_out} != text hidden_size {hidden} "
                       f"(image features replace token embeddings)")
        if v_hidden % v_heads or (v_hidden // v_heads) % 4:
            out.append(f"vision_config.num_heads: hidden_size {v_hidden} / {v_heads} heads is not "
                       f"a multiple of 4 (the vision tower's 2-D rotary needs it)")
        for name in ("deepstack_visual_indexes", "fullatt_block_indexes"):
            idx = _get(vision, name)
            if idx is not None and (any(not 0 <= i < depth for i in idx) or len(set(idx)) < len(idx)):
                out.append(f"vision_config.{name}: {list(idx)} must be distinct layers in "
                           f"[0, depth = {depth})")
        pos = _get(vision, "num_position_embeddings")
        if pos is not None and math.isqrt(pos) ** 2 != pos:
            out.append(f"vision_config.num_position_embeddings: {pos} is not a square "
                       f"(a side × side grid of learned positions)")
    vocab = _get(text, "vocab_size")
    for name in ("image_token_id", "video_token_id", "vision_start_token_id", "vision_end_token_id"):
        tid = _get(config, name)
        if tid is not None and vocab is not None and not 0 <= tid < vocab:
            out.append(f"{name}: {tid} is outside the vocabulary [0, {vocab})")
    return out


def check_config(config, what: str = "model config"):
    """``config`` unchanged if :func:`config_problems` finds nothing, else ValueError naming
    every offending field."""
    problems = config_problems(config)
    if problems:
        raise ValueError(f"{what} is not self-consistent (an engine would 'correct' or "
                         f"misread it):\n  " + "\n  ".join(problems))
    return config
