"""Fixtures of the softness experiment's tests.

* `seed_dir`: a ``budget=paths`` seed directory at a tiny size, shared by the session (a test
  that writes into it removes what it wrote): the path
  tasks' benchmark (3 train / 6 test questions per task, 192-pixel boards, in words) under
  ``data/`` and `tiny_paths_model` (a random model standing in for the warm start) as
  ``models/warmstart``.
"""
from __future__ import annotations

import shutil

import pytest

from soft_spatial.data.synthetic import SyntheticConfig, write_benchmark

PATHS = ("path_known", "path_two", "path_three")


@pytest.fixture(scope="session")
def seed_dir(tmp_path_factory, tiny_paths_model):
    root = tmp_path_factory.mktemp("seed") / "seed0"
    write_benchmark(root / "data", train=3, test=6, seed=0,
                    cfg=SyntheticConfig(size=192, tasks=PATHS, options=(4,), describe=True,
                                        option_order="canonical"))
    shutil.copytree(tiny_paths_model, root / "models" / "warmstart")
    return root
