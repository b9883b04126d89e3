"""The smoke reward: a reward with variance for random tiny policies (the GPU kit's E jobs and the
suite's training tests; verl loads it by path: ``reward.custom_reward_function.path=`` this file,
:func:`soft_spatial_bench.gpu.grpo.smoke_reward_path`) (the real reward is always 0 for
them, so GRPO advantages would vanish and no gradient would flow): a deterministic hash of the
response text in [0, 1], plus the real reward, plus a random tie-break below 0.001.

The tie-break matters: a random tiny policy sometimes collapses into repeating one token, and then
both samples of a group can be the same text. Their scores tie, their GRPO advantages are 0, and
if both micro-batches' AdaptSoft reference sequences are such rows (verl's balance_batch spreads a
group over micro-batches), every alignment score is exactly 0 and the controller gets no gradient:
what once made a one-step adaptsoft training test fail (controller grad_norm
0, alignment scale at its 1e6 cap: no non-zero alpha in the whole step)."""
import random
import zlib

from soft_spatial.data.reward import compute_score as real_score

_tie_break = random.Random()  # seeded from the OS in each reward-loop worker process


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    out = compute_score_deterministic(data_source, solution_str, ground_truth, extra_info)
    out["score"] += _tie_break.random() * 1e-3  # < 0.001: the text's hash still dominates
    return out


def compute_score_deterministic(data_source, solution_str, ground_truth, extra_info=None,
                                **kwargs):
    """Without the tie-break: a function of the text alone, for runs compared bit for bit
    (``reward.custom_reward_function.name=compute_score_deterministic``)."""
    out = real_score(data_source, solution_str, ground_truth, extra_info)
    out["score"] = out["score"] + (zlib.crc32(solution_str.encode()) % 1000) / 1000.0
    return out
