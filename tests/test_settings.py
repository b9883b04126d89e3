"""soft_spatial.softthink.settings: rollout.custom parsed once, the seeds, verl's sampling mapping."""
import pytest

from soft_spatial.softthink.settings import (SoftSettings, request_row_seed, request_seed, row_seed, sampling_config)
from soft_spatial.softthink import (AdaptSoftConfig, AlignmentConfig, DensityConfig, KLConfig,
                                    SoftThinkingConfig)


def test_from_dict_defaults_groups_and_scalars():
    s = SoftSettings.from_dict(None)
    assert (s.soft_thinking, s.adaptsoft, s.density, s.alignment, s.kl) == (
        SoftThinkingConfig(), AdaptSoftConfig(), DensityConfig(), AlignmentConfig(), KLConfig())
    s = SoftSettings.from_dict({"soft_thinking": {"mode": "adaptsoft"}, "seed": 7,
                                  "alignment": {"enabled": False}, "max_batch_rows": 3})
    assert (s.soft_thinking.mode, s.seed, s.alignment.enabled, s.max_batch_rows) == ("adaptsoft", 7,
                                                                           False, 3)


def test_from_dict_names_what_is_wrong():
    with pytest.raises(ValueError, match=r"unknown keys \['sed'\]"):
        SoftSettings.from_dict({"sed": 1})
    with pytest.raises(Exception, match="rollout.custom.soft_thinking"):
        SoftSettings.from_dict({"soft_thinking": {"nope": 1}})


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


# -- every setting is type-checked, and the error names it -------------------------------------
def _eval_config(**change):
    from soft_spatial.eval.runner import EvalConfig
    base = dict(benchmarks=["omnispatial"], data={"omnispatial": "/data"}, model_path="m",
                soft_thinking=SoftThinkingConfig(mode="hard"), output_dir="out")
    return EvalConfig(**(base | change))


def _typed_fields():
    import dataclasses
    import typing

    from soft_spatial.eval.runner import EvalConfig
    from soft_spatial.softthink import SamplingConfig
    for cls in (SoftThinkingConfig, SamplingConfig, AdaptSoftConfig, DensityConfig,
                AlignmentConfig, KLConfig, SoftSettings, EvalConfig):
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            if (cls.__name__, f.name) == ("EvalConfig", "task_types"):
                continue  # normalised first: a string is one task type
            takes_str = str in (typing.get_args(hints[f.name]) or (hints[f.name],))
            yield pytest.param(cls, f.name, 1.5 if takes_str else "abc", id=f"{cls.__name__}.{f.name}")


@pytest.mark.parametrize("cls, name, wrong", list(_typed_fields()))
def test_a_wrongly_typed_setting_is_an_error_naming_it(cls, name, wrong):
    """``temperature=abc`` on the command line: a ValueError naming the field, for every field
    (a comparison used to raise a bare TypeError, and some wrong types passed unnoticed)."""
    build = _eval_config if cls.__name__ == "EvalConfig" else cls
    with pytest.raises(ValueError, match=rf"^{cls.__name__}\.{name}(\[\d+\])?: expected "):
        build(**{name: wrong})


def test_well_typed_settings_pass_and_a_float_field_takes_an_int():
    from omegaconf import OmegaConf

    from soft_spatial.softthink import SamplingConfig
    s = SamplingConfig(temperature=1, top_p=1)
    assert type(s.temperature) is float and type(s.top_p) is float and s.temperature == 1.0
    assert _eval_config(temperature=1, limit=None, controller=None).temperature == 1.0
    # what Hydra hands over: OmegaConf containers and lists for tuples
    custom = OmegaConf.create({"soft_thinking": {"mode": "fixed", "noise_clamp": [-1, 3]},
                               "density": {"clamp": [-1.5, 3]}, "seed": 3})
    s = SoftSettings.from_dict(custom)
    assert s.soft_thinking.noise_clamp == (-1.0, 3.0) and s.density.clamp == (-1.5, 3.0)
    with pytest.raises(ValueError, match=r"^SoftThinkingConfig.noise_clamp\[1\]: expected a number"):
        SoftThinkingConfig(noise_clamp=[-1, "x"])
    with pytest.raises(ValueError, match=r"^SoftThinkingConfig.noise_clamp: expected 2 values"):
        SoftThinkingConfig(noise_clamp=[-1, 2, 3])
