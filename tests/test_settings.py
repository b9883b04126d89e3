"""soft_spatial.settings: rollout.custom parsed once, the seeds, verl's sampling mapping."""
import pytest

from soft_spatial.settings import (SoftSettings, request_row_seed, request_seed, row_seed,
                                   sampling_config)
from soft_spatial.softthink import (AdaptSoftConfig, AlignmentConfig, DensityConfig, KLConfig,
                                    SoftThinkingConfig)


def test_from_custom_defaults_groups_and_scalars():
    s = SoftSettings.from_custom(None)
    assert (s.soft_thinking, s.adaptsoft, s.density, s.alignment, s.kl) == (
        SoftThinkingConfig(), AdaptSoftConfig(), DensityConfig(), AlignmentConfig(), KLConfig())
    s = SoftSettings.from_custom({"soft_thinking": {"mode": "adaptsoft"}, "seed": 7,
                                  "alignment": {"enabled": False}, "max_batch_rows": 3})
    assert (s.soft_thinking.mode, s.seed, s.alignment.enabled, s.max_batch_rows) == ("adaptsoft", 7,
                                                                           False, 3)


def test_from_custom_names_what_is_wrong():
    with pytest.raises(ValueError, match=r"unknown keys \['sed'\]"):
        SoftSettings.from_custom({"sed": 1})
    with pytest.raises(Exception, match="rollout.custom.soft_thinking"):
        SoftSettings.from_custom({"soft_thinking": {"nope": 1}})


def test_seeds_are_pure_functions_of_their_inputs():
    assert row_seed(3, 2) == 3 * 10_007 + 2
    assert request_seed(0, "a") == request_seed(0, "a") != request_seed(1, "a")
    assert request_row_seed(5, "rid-1") == row_seed(request_seed(5, "rid-1"), 0)
    assert 0 <= request_seed(2 ** 40, "x") < 2 ** 62


def test_sampling_config_maps_verl_params():
    s = sampling_config({"temperature": 0.6, "top_k": 20, "top_p": 0.95, "max_tokens": 50}, 30)
    assert (s.temperature, s.top_k, s.top_p, s.max_new_tokens, s.greedy) == (0.6, 20, 0.95, 30,
                                                                            False)
    assert sampling_config({}, 8).max_new_tokens == 8 and sampling_config({}, 8).top_k == 0
