"""E's diagnosis (soft_spatial_bench/gpu/replay_inputs.py): the first divergent step and the split
maxima from per-row, per-step likelihoods, against a hand count. The diagnosis end to end (SGLang's
rollout, the replay, the tensors) runs in the plan's dry run with E/fp32."""
from __future__ import annotations

import math

from soft_spatial_bench.gpu import replay_inputs


def test_compare_rows_finds_the_first_step_beyond_the_bound_and_the_split_maxima():
    rollout = [[-1.0, -2.0, -3.0, -4.0], [-1.0, -2.0, -3.0]]
    replay = [[-1.0, -2.0005, -3.1, -4.0], [-1.5, -2.0, -3.0 + 2e-4]]
    soft = [[False, True, True, False], [True, True, False]]
    got = replay_inputs.compare_rows(rollout, replay, soft, 1e-3)
    # step 0 of row 1 (0.5) comes before step 2 of row 0 (0.1): steps first, then rows
    assert got["first_beyond"] == {"row": 1, "step": 0, "soft": True, "delta": 0.5}
    assert got["max"]["step0"] == 0.5 and got["max"]["all"] == 0.5
    assert math.isclose(got["max"]["soft"], 0.5) and math.isclose(got["max"]["hard"], 2e-4,
                                                                    rel_tol=1e-6)
    assert [round(x, 6) for x in got["per_step"]] == [0.5, 0.0005, 0.1, 0.0]


def test_a_nan_is_a_divergence_and_agreement_has_none():
    got = replay_inputs.compare_rows([[-1.0, float("nan")]], [[-1.0, -2.0]], [[True, True]], 1e-3)
    assert got["first_beyond"]["step"] == 1 and got["max"]["soft"] == math.inf
    same = replay_inputs.compare_rows([[-1.0, -2.0]], [[-1.0, -2.0]], [[True, False]], 1e-3)
    assert same["first_beyond"] is None and same["max"]["all"] == 0.0


def test_render_says_what_was_compared_or_why_not():
    assert "not run: 10 s left" in replay_inputs.render({"skipped": "10 s left"})[0]
    d = {"rows": 2, "steps": 8, "dtype": "float32", "bound": 1e-3, "prompt_tokens": 30,
         "likelihood": {"first_beyond": None, "max": dict(step0=0.0, soft=1e-6, hard=0.0, all=1e-6),
                        "per_step": [0.0, 1e-6]},
         "mixture_max_abs": 0.0,
         "positions": {"mismatched_steps": 0, "first_mismatch": None,
                       "prompt_positions_equal": True},
         "vision": {"grid_equal": True, "pixel_max_abs": 0.0, "features_max_abs": 0.0,
                    "features_shape": [4, 64]}}
    text = "\n".join(replay_inputs.render(d))
    assert "first step beyond 0.001 nats: none" in text
    assert "positions: the prompt's equal" in text and "grids equal" in text
