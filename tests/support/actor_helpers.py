"""Helpers shared by the tests/actor/test_*.py modules (no tests here): they live in
`soft_spatial_bench.workloads`, shared with the benchmarks."""
from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VERL_PLATFORM", "cpu")
# the plugin's registrations, the CPU platform first: a verl import elsewhere in this process (any
# test module collected after this one) would otherwise find "cpu" selected but unknown
from soft_spatial.plugin import register  # noqa: E402

register()

from soft_spatial_bench.workloads import (  # noqa: E402,F401  (re-exported)
    PROMPTS,
    actor_config,
    make_train_engine,
    rollouts,
    set_infer_keys,
    train_batch_td,
    verl_batch,
)
from soft_spatial_bench.workloads import random_controller as trained_controller  # noqa: E402,F401
