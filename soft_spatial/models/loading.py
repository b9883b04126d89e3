"""Load a local model directory: Qwen3-VL / Qwen2.5-VL (with processor) or a text-only causal LM.
The directory checks (`resolve_model_dir`, `check_top_k`) import neither torch nor transformers:
a command refuses a bad ``model.path`` or ``top_k`` before those imports."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


def is_vision_language(config) -> bool:
    """Whether `config` describes an image-text-to-text model (it has a vision tower config)."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES

    return config.model_type in MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES and hasattr(config, "vision_config")


def load_processing(path: str | os.PathLike):
    """Load ``(config, processor_or_None, tokenizer)`` from a local model directory (no weights):
    vision-language models get ``AutoProcessor`` (the tokenizer being the processor's), text-only
    models ``AutoTokenizer`` and processor None."""
    from transformers import AutoConfig, AutoProcessor, AutoTokenizer, PreTrainedTokenizerBase

    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"model path {str(path)!r} does not exist")
    if not path.is_dir() or not (path / "config.json").is_file():
        raise ValueError(f"{str(path)!r} is not a model directory (no config.json)")
    config = AutoConfig.from_pretrained(path)
    if not is_vision_language(config):
        return config, None, AutoTokenizer.from_pretrained(path)
    processor = AutoProcessor.from_pretrained(path)
    if isinstance(processor, PreTrainedTokenizerBase):
        raise ValueError(f"{str(path)!r} holds a {config.model_type} model but no processor files")
    return config, processor, processor.tokenizer


def load_model(
    path: str | os.PathLike, device: str | torch.device = "cpu", dtype: torch.dtype | None = None, **kwargs
):
    """Load `(model, processor_or_None, tokenizer)` from a local model directory, in eval mode.

    Vision-language models (Qwen3-VL, Qwen2.5-VL, ...) load with `AutoModelForImageTextToText` and
    `AutoProcessor`, the tokenizer being the processor's; text-only models load with
    `AutoModelForCausalLM` and `AutoTokenizer`, with processor None. Attention is "sdpa". Extra
    `kwargs` go to the model's `from_pretrained`. ``dtype`` defaults to float32.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText

    dtype = torch.float32 if dtype is None else dtype

    config, processor, tokenizer = load_processing(path)
    kwargs.setdefault("attn_implementation", "sdpa")
    auto = AutoModelForImageTextToText if processor is not None else AutoModelForCausalLM
    model = auto.from_pretrained(Path(path), dtype=dtype, **kwargs)
    return model.to(device).eval(), processor, tokenizer


def resolve_model_dir(path: str | os.PathLike, *, build_tiny: bool = False, tiny_family: str = "qwen3_vl",
                      setting: str = "model.path") -> Path:
    """``path`` if it is a model directory. A missing directory is an error naming ``setting``,
    unless ``build_tiny`` asks explicitly for a tiny random model to be built there: a mistyped
    path never silently becomes a fresh random model."""
    path = Path(path)
    if not path.exists():
        if not build_tiny:
            raise FileNotFoundError(
                f"{setting}={str(path)!r} does not exist. Point {setting} at a local model "
                f"directory, or build a tiny random model there with model.build_tiny=true "
                f"(or python -m soft_spatial.models.tiny --out {path})")

        print(f"building a tiny random {tiny_family} model at {path} (model.build_tiny=true)")
        from soft_spatial.models import tiny  # torch: imported only when a model is built

        tiny.build_tiny_model(path, family=tiny_family, vocab="qwen")
    if not path.is_dir() or not (path / "config.json").is_file():
        raise ValueError(f"{setting}={str(path)!r} is not a model directory (no config.json)")
    return path


def vocab_rows(path: str | os.PathLike) -> int | None:
    """The rows of a model directory's output layer as its ``config.json`` states them (a
    vision-language model's ``text_config.vocab_size``, else ``vocab_size``), read without loading
    anything; None when it states none."""
    config = json.loads((Path(path) / "config.json").read_text(encoding="utf-8"))
    for block in (config.get("text_config"), config):
        if isinstance(block, dict) and isinstance(block.get("vocab_size"), int):
            return block["vocab_size"]
    return None


def check_top_k(top_k: int, path: str | os.PathLike, setting: str = "soft_thinking.top_k",
                model_setting: str = "model.path") -> None:
    """Refuse K (``top_k``) candidates of a soft step beyond the model's vocabulary (its output
    layer's rows, `vocab_rows`): the top-K would hold tokens that do not exist. Checked before a
    command loads the model or starts anything; one line naming both settings."""
    rows = vocab_rows(path)
    if rows is not None and top_k > rows:
        raise ValueError(f"{setting}={top_k} is more than the vocabulary of {model_setting}={path} "
                         f"({rows} tokens, config.json's vocab_size): K candidates are distinct "
                         f"tokens; choose {setting} <= {rows} (the paper's is 5)")
