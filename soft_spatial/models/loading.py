"""Load a local model directory: Qwen3-VL / Qwen2.5-VL (with processor) or a text-only causal LM."""

from __future__ import annotations

import os
from pathlib import Path

import torch


def is_vision_language(config) -> bool:
    """Whether `config` describes an image-text-to-text model (it has a vision tower config)."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES

    return config.model_type in MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES and hasattr(config, "vision_config")


def load_model(
    path: str | os.PathLike, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32, **kwargs
):
    """Load `(model, processor_or_None, tokenizer)` from a local model directory, in eval mode.

    Vision-language models (Qwen3-VL, Qwen2.5-VL, ...) load with `AutoModelForImageTextToText` and
    `AutoProcessor`, the tokenizer being the processor's; text-only models load with
    `AutoModelForCausalLM` and `AutoTokenizer`, with processor None. Attention is "sdpa". Extra
    `kwargs` go to the model's `from_pretrained`.
    """
    from transformers import (
        AutoConfig,
        AutoModelForCausalLM,
        AutoModelForImageTextToText,
        AutoProcessor,
        AutoTokenizer,
        PreTrainedTokenizerBase,
    )

    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"model path {str(path)!r} does not exist")
    if not path.is_dir() or not (path / "config.json").is_file():
        raise ValueError(f"{str(path)!r} is not a model directory (no config.json)")
    config = AutoConfig.from_pretrained(path)
    kwargs.setdefault("attn_implementation", "sdpa")
    if is_vision_language(config):
        model = AutoModelForImageTextToText.from_pretrained(path, dtype=dtype, **kwargs)
        processor = AutoProcessor.from_pretrained(path)
        if isinstance(processor, PreTrainedTokenizerBase):
            raise ValueError(f"{str(path)!r} holds a {config.model_type} model but no processor files")
        tokenizer = processor.tokenizer
    else:
        model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, **kwargs)
        processor, tokenizer = None, AutoTokenizer.from_pretrained(path)
    return model.to(device).eval(), processor, tokenizer
