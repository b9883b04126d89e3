"""A test-only reward with variance for random tiny policies (the real reward is always 0 for
them, so GRPO advantages would vanish and no gradient would flow): a deterministic hash of the
response text in [0, 1], plus the real reward."""
import zlib

from soft_spatial.reward import compute_score as real_score


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    out = real_score(data_source, solution_str, ground_truth, extra_info)
    out["score"] = out["score"] + (zlib.crc32(solution_str.encode()) % 1000) / 1000.0
    return out
