"""Token-id lookups the method depends on: `<think>` / `</think>` and the end-of-sequence ids.

The soft phase ends when the discrete spine emits `</think>`, so its id must be one token; these
helpers fail loudly (naming the tokenizer) instead of silently matching a fragment.
"""

from __future__ import annotations

import os
from pathlib import Path

THINK_START = "<think>"
THINK_END = "</think>"


def _name(tokenizer) -> str:
    return getattr(tokenizer, "name_or_path", None) or type(tokenizer).__name__


def single_token_id(tokenizer, text: str) -> int:
    """Id of `text` if the tokenizer encodes it as exactly one token, else ValueError."""
    ids = list(tokenizer.encode(text, add_special_tokens=False))
    if len(ids) != 1:
        raise ValueError(
            f"{text!r} is not a single token in tokenizer {_name(tokenizer)!r}: it encodes to {ids}; "
            f"soft thinking needs a model whose tokenizer has {text!r} as one (added) token"
        )
    return int(ids[0])


def think_start_id(tokenizer) -> int:
    """Id of `<think>` (151667 in Qwen3 tokenizers)."""
    return single_token_id(tokenizer, THINK_START)


def think_end_id(tokenizer) -> int:
    """Id of `</think>` (151668 in Qwen3 tokenizers)."""
    return single_token_id(tokenizer, THINK_END)


def _as_list(value) -> list[int]:
    if value is None:
        return []
    if isinstance(value, int):
        return [value]
    return [int(v) for v in value]


def stop_token_ids(config, tokenizer, generation_config=None) -> list[int]:
    """The ids that end a generated response, in order, without duplicates: the generation
    config's eos ids, then the model config's and the tokenizer's. A generation config without
    eos ids (a generation_config.json holding only sampling defaults) adds none; ValueError only
    when no source has one."""
    first = _as_list(getattr(generation_config, "eos_token_id", None))
    return list(dict.fromkeys(first + eos_token_ids(config, tokenizer)))


def eos_token_ids(source, tokenizer=None) -> list[int]:
    """End-of-sequence ids, in order, without duplicates.

    `source` is a model directory, a `GenerationConfig` or a model config. Ids come from its
    `eos_token_id` (for a directory: generation_config.json, else config.json, including a nested
    `text_config`), then the tokenizer's eos if one is given. ValueError if none is found.
    """
    ids: list[int] = []
    if isinstance(source, (str, os.PathLike)):
        from transformers import AutoConfig, GenerationConfig

        path = Path(source)
        if (path / "generation_config.json").is_file():
            ids += _as_list(GenerationConfig.from_pretrained(path).eos_token_id)
        if not ids:
            config = AutoConfig.from_pretrained(path)
            ids += _as_list(getattr(config, "eos_token_id", None))
            ids += _as_list(getattr(getattr(config, "text_config", None), "eos_token_id", None))
    elif source is not None:
        ids += _as_list(getattr(source, "eos_token_id", None))
        ids += _as_list(getattr(getattr(source, "text_config", None), "eos_token_id", None))
    if tokenizer is not None:
        ids += _as_list(tokenizer.eos_token_id)
    unique = list(dict.fromkeys(ids))
    if not unique:
        where = f"{source!r}" + (f" or tokenizer {_name(tokenizer)!r}" if tokenizer is not None else "")
        raise ValueError(f"no eos_token_id found in {where}")
    return unique


def unusable_token_ids(config, tokenizer, vocab_rows: int) -> list[int]:
    """Ids a policy must never emit, sorted: the vision placeholders (verl and the processors
    locate image positions by id, so a sampled placeholder would corrupt the next forward) and
    padded vocabulary rows beyond the tokenizer (they have no token). The rollout engine masks
    them before sampling, and the training side masks the same ids when it scores discrete steps,
    so both see the same distribution."""
    names = ("image_token_id", "video_token_id", "vision_start_token_id", "vision_end_token_id")
    ids = {getattr(config, k, None) for k in names}
    ids |= set(range(len(tokenizer), vocab_rows))
    return sorted(i for i in ids if i is not None and 0 <= i < vocab_rows)
