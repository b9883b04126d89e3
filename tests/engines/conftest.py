"""Fixtures of the engine tests (tests/engines/): a fresh embedded engine of the tiny Qwen3-VL for one
test, in fp32 (``engine``) and fp64 (``engine64``); a test may change its head or controller.
(tests/engines/sglang/test_runtime.py has an ``engine`` of its own, with a </think> bonus.)"""
import pytest
import torch

from soft_spatial.engines import LocalEngine


@pytest.fixture
def engine(tiny_qwen3_vl_small):
    return LocalEngine.from_pretrained(tiny_qwen3_vl_small)


@pytest.fixture
def engine64(tiny_qwen3_vl_small):
    return LocalEngine.from_pretrained(tiny_qwen3_vl_small, dtype=torch.float64)
