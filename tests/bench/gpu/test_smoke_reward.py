"""The smoke reward (soft_spatial_bench/gpu/smoke_reward.py), which verl loads by path for the GPU
kit's E jobs and the suite's training tests (through tests/support/smoke_reward.py)."""
from __future__ import annotations

import importlib.util
import zlib
from pathlib import Path

from soft_spatial_bench.gpu import grpo, smoke_reward

ROOT = Path(__file__).resolve().parents[3]


def _load(path: Path):
    """As verl loads ``reward.custom_reward_function.path``: the file as a module of its own."""
    spec = importlib.util.spec_from_file_location("custom_module", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_deterministic_score_is_the_texts_hash_plus_the_real_reward():
    from soft_spatial.data.reward import compute_score as real
    args = ("omnispatial", "<think>x</think>The answer is B.", "B")
    got = smoke_reward.compute_score_deterministic(*args)["score"]
    assert got == real(*args)["score"] + (zlib.crc32(args[1].encode()) % 1000) / 1000.0
    tie = smoke_reward.compute_score(*args)["score"] - got
    assert 0 <= tie < 1e-3


def test_the_kits_path_and_the_suites_path_load_the_same_functions():
    assert grpo.smoke_reward_path() == Path(smoke_reward.__file__)
    args = ("omnispatial", "no letter here", "C")
    want = smoke_reward.compute_score_deterministic(*args)
    for path in (grpo.smoke_reward_path(), ROOT / "tests" / "support" / "smoke_reward.py"):
        assert _load(path).compute_score_deterministic(*args) == want
