"""The smoke reward for the suite's training tests, which pass this file's path to verl
(``reward.custom_reward_function.path``): it lives in the package,
:mod:`soft_spatial_bench.gpu.smoke_reward` (the GPU kit's E jobs use it too)."""
from soft_spatial_bench.gpu.smoke_reward import compute_score, compute_score_deterministic

__all__ = ["compute_score", "compute_score_deterministic"]
