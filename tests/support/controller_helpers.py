"""Test helper shared by the engine, actor and SGLang tests (no tests here)."""
from soft_spatial_bench.workloads import random_controller as trained_controller  # noqa: F401  (re-exported)
