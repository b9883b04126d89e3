"""Loading a local model directory (`soft_spatial.models.loading`): vision-language models with their
processor, text-only models with their tokenizer, and a model path that is missing or not a model
directory refused naming the setting."""

from __future__ import annotations

import pytest
import torch

from soft_spatial.models import load_model, think_end_id
from soft_spatial.models.loading import resolve_model_dir


def test_load_model(tiny_qwen3_vl_small, tiny_qwen3_text_small, tmp_path):
    model, processor, tok = load_model(tiny_qwen3_vl_small, dtype=torch.bfloat16)
    assert type(model).__name__ == "Qwen3VLForConditionalGeneration" and not model.training
    assert model.dtype == torch.bfloat16 and model.config._attn_implementation == "sdpa"
    assert type(processor).__name__ == "Qwen3VLProcessor" and tok is processor.tokenizer
    model, processor, tok = load_model(tiny_qwen3_text_small)
    assert type(model).__name__ == "Qwen3ForCausalLM" and processor is None and not model.training
    assert model.dtype == torch.float32 and think_end_id(tok) == tok.convert_tokens_to_ids("</think>")

    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_model(tmp_path / "missing")
    with pytest.raises(ValueError, match="not a model directory"):
        load_model(tmp_path)


def test_a_model_path_is_a_model_directory_or_an_error_naming_the_setting(tiny_qwen3_vl_small, tmp_path,
                                                                          monkeypatch):
    import soft_spatial.models.tiny as tiny

    assert resolve_model_dir(tiny_qwen3_vl_small) == tiny_qwen3_vl_small
    with pytest.raises(FileNotFoundError, match=r"actor\.path='.*mistyped' does not exist"):
        resolve_model_dir(tmp_path / "mistyped", setting="actor.path")
    assert not (tmp_path / "mistyped").exists()  # a mistyped path never becomes a fresh model
    (tmp_path / "file").write_text("{}")
    with pytest.raises(ValueError, match=r"model\.path='.*file' is not a model directory"):
        resolve_model_dir(tmp_path / "file")
    built = []
    monkeypatch.setattr(tiny, "build_tiny_model", lambda path, **kw: built.append((path, kw)))
    with pytest.raises(ValueError, match="is not a model directory"):  # built nothing: still refused
        resolve_model_dir(tmp_path / "asked", build_tiny=True, tiny_family="qwen2_5_vl")
    assert built == [(tmp_path / "asked", {"family": "qwen2_5_vl", "vocab": "qwen"})]
