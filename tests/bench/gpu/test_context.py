"""What a piece of the GPU kit's work runs with (soft_spatial_bench/gpu/context.py), on the CPU:
environment changes scoped to a block (restored, unset ones removed, also on an error), the
deadline, and the 8B-shaped model of a dry run: its config, tokenizer and processor without
weights, written once per machine (a second call finds it), with a controller beside it. (The
2B-shaped model the engines share is built in the plan's dry run:
tests/sglang_real/test_gpu_headline_dry_run.py.)"""
from __future__ import annotations

import os
from dataclasses import replace
from types import SimpleNamespace

import pytest

from soft_spatial_bench.gpu import context


def test_env_vars_hold_for_the_block_only(monkeypatch):
    monkeypatch.setenv("SOFT_SPATIAL_TEST_SET", "before")
    monkeypatch.delenv("SOFT_SPATIAL_TEST_UNSET", raising=False)
    with pytest.raises(RuntimeError):
        with context.env_vars({"SOFT_SPATIAL_TEST_SET": "in", "SOFT_SPATIAL_TEST_UNSET": "in"}):
            assert os.environ["SOFT_SPATIAL_TEST_SET"] == os.environ["SOFT_SPATIAL_TEST_UNSET"] == "in"
            raise RuntimeError("a failed engine start")
    assert os.environ["SOFT_SPATIAL_TEST_SET"] == "before" and "SOFT_SPATIAL_TEST_UNSET" not in os.environ


def test_the_deadline_is_what_is_left_of_the_wall_time(monkeypatch, tmp_path):
    monkeypatch.setattr(context.time, "time", lambda: 1000.0)
    ctx = context.KitContext(dry_run=True, device="cpu", work=tmp_path, out=tmp_path,
                             deadline_at=1540.0, report=None)
    assert ctx.remaining() == 540.0


def test_the_8b_shaped_model_is_written_once_without_weights(tmp_path):
    from transformers import AutoConfig

    ctx = context.KitContext(dry_run=True, device="cpu", work=tmp_path / "work", out=tmp_path / "out",
                             deadline_at=0.0, report=None)
    facts = context.measure_model(ctx, SimpleNamespace(args={"model": "8b"}))
    model = tmp_path / "work" / context.MODEL_8B_DIR
    files = {p.name: p.stat().st_mtime_ns for p in model.iterdir()}
    assert {"config.json", "generation_config.json", "tokenizer.json", "processor_config.json"} <= set(files)
    assert not [f for f in files if f.endswith((".safetensors", ".bin"))]  # SGLang draws the weights
    config = AutoConfig.from_pretrained(model)
    assert config.architectures == ["Qwen3VLForConditionalGeneration"]
    assert facts.model == "8b" and facts.hidden == config.text_config.hidden_size
    assert facts.mrope_section == config.text_config.rope_parameters["mrope_section"]
    assert (tmp_path / "work" / ("8b-" + context.CONTROLLER)).is_file()
    again = context.model_8b(ctx)[2]
    assert replace(again, seconds=0.0) == replace(facts, seconds=0.0)
    assert {p.name: p.stat().st_mtime_ns for p in model.iterdir()} == files  # found, not rewritten
    line = context.render_model(facts)[0]
    assert line.startswith("Qwen3-VL-8B-Thinking's published shape") and "weights SGLang's" in line
