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


# Published shapes (config.json of the Hugging Face releases); the weights are random.
QWEN3_VL_8B = dict(
    hidden_size=4096, intermediate_size=12288, num_hidden_layers=36, num_attention_heads=32,
    num_key_value_heads=8, head_dim=128, max_position_embeddings=262144, rms_norm_eps=1e-6,
    rope_parameters={"rope_type": "default", "rope_theta": 5e6, "mrope_section": [24, 20, 20],
                     "mrope_interleaved": True},
    vision_config=dict(depth=27, hidden_size=1152, intermediate_size=4304, num_heads=16,
                       out_hidden_size=4096, patch_size=16, num_position_embeddings=2304,
                       deepstack_visual_indexes=[8, 16, 24], hidden_act="gelu_pytorch_tanh"))
# Qwen3-VL-2B-Instruct/Thinking: text = Qwen3-1.7B's shape (stage c's language model), mrope as
# the 8B, tied embeddings, the 4B's vision tower with out_hidden_size 2048
QWEN3_VL_2B_TEXT = dict(
    hidden_size=2048, intermediate_size=6144, num_hidden_layers=28, num_attention_heads=16,
    num_key_value_heads=8, head_dim=128, max_position_embeddings=262144, rms_norm_eps=1e-6)
QWEN3_VL_2B_VISION = dict(depth=24, hidden_size=1024, intermediate_size=4096, num_heads=16,
                          out_hidden_size=2048, patch_size=16, num_position_embeddings=2304,
                          deepstack_visual_indexes=[5, 11, 17], hidden_act="gelu_pytorch_tanh")
def parity_init(hidden: int) -> dict:
    """Random-weight std for stage d's parity model at width ``hidden``: per-layer gain
    std·√hidden = 0.32 and output logits of std ≈ 4 (the tiny model's); use it untied. With the
    tiny defaults (0.1, 0.5) a 2B-wide or 28-layer model is chaotic under soft feedback: the
    embedded engine's own fp32 run leaves its fp64 path within 5-10 soft steps, so no engine can
    match it (scripts/gpu/drift_cpu.py: gain 0.8 over 28 layers still does; 0.32 untied stays
    on the path with |Δ scores| ≤ 2.2e-5 over 32 steps and mixtures of top weight 0.66-0.80)."""
    return dict(init_std=0.32 / hidden ** 0.5, head_init_std=4.0 / hidden ** 0.5)


QWEN3_VL_2B = dict(
    QWEN3_VL_2B_TEXT, tie_word_embeddings=True, vision_config=QWEN3_VL_2B_VISION,
    rope_parameters={"rope_type": "default", "rope_theta": 5e6, "mrope_section": [24, 20, 20],
                     "mrope_interleaved": True})
