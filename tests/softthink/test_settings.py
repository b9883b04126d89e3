"""soft_spatial.softthink.settings: rollout.custom parsed once, verl's sampling mapping (the seeds:
tests/softthink/test_noise.py)."""
from pathlib import Path

import pytest

from soft_spatial.softthink.settings import SoftSettings, sampling_config
from soft_spatial.softthink import (AdaptSoftConfig, AlignmentConfig, DensityConfig, KLConfig, ReplayCheckConfig,
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


# -- one SoftSettings across every boundary ------------------------------------------------------
#: a value away from its default in every field of every group, so a field dropped at a boundary fails
NON_DEFAULT = SoftSettings(
    soft_thinking=SoftThinkingConfig(mode="fixed", top_k=3, noise_scale=0.5, fixed_tau=0.3,
                                     noise_clamp=(-1.5, 3.0), think_end="<end>"),
    adaptsoft=AdaptSoftConfig(proj_dim=4, width=16, tau0=0.6, delta=0.3, entropy_mean=0.2, entropy_std=0.3,
                              use_hidden=False, use_entropy=True, seed=4),
    density=DensityConfig(reduce="mean", clamp=(-1.5, 3.0), min_logp=-3.0, fp32_logits=True),
    alignment=AlignmentConfig(enabled=False, ref_fraction=0.5, beta=0.9, target=1e-2, max_scale=1e5, eps=1e-20,
                              center=False, lr=1e-4, weight_decay=0.0, grad_clip=2.0, vocab_block=1024),
    kl=KLConfig(over="candidates"), replay_check=ReplayCheckConfig(bound=0.25, fp32_bound=2e-3, bf16_bound=3.0,
                                                             on_exceed="stop"),
    seed=7, batch_window_s=0.05, max_batch_rows=3, stream_wait_s=5.0)
GROUPS = ("soft_thinking", "adaptsoft", "density", "alignment", "kl", "replay_check")
#: the groups evaluation holds (the replay check is training's: evaluation replays nothing)
EVAL_GROUPS = tuple(g for g in GROUPS if g != "replay_check")


def test_the_example_differs_from_the_defaults_in_every_field():
    import dataclasses
    default = SoftSettings()
    for f in dataclasses.fields(SoftSettings):
        ours, theirs = getattr(NON_DEFAULT, f.name), getattr(default, f.name)
        if f.name not in GROUPS:
            assert ours != theirs, f.name
            continue
        for g in dataclasses.fields(ours):
            # AdaptSoftConfig needs one of use_hidden / use_entropy
            if (f.name, g.name) != ("adaptsoft", "use_entropy"):
                assert getattr(ours, g.name) != getattr(theirs, g.name), f"{f.name}.{g.name}"


def test_to_dict_from_dict_round_trip_and_errors_name_the_path():
    d = NON_DEFAULT.to_dict()
    assert SoftSettings.from_dict(d) == NON_DEFAULT and d["soft_thinking"]["noise_clamp"] == [-1.5, 3.0]
    assert SoftSettings.from_dict(None) == SoftSettings()
    with pytest.raises(ValueError, match=r"^soft\.adaptsoft: AdaptSoftConfig\.width: expected an integer"):
        SoftSettings.from_dict({"adaptsoft": {"width": "wide"}}, where="soft")
    with pytest.raises(ValueError, match=r"^x\.yaml: SoftSettings\.seed: expected an integer"):
        SoftSettings.from_dict({"seed": "s"}, where="x.yaml")
    with pytest.raises(ValueError, match=r"^x\.yaml: expected a mapping"):
        SoftSettings.from_dict(["mode"], where="x.yaml")


def test_the_verl_config_and_a_ray_actor_argument_carry_it():
    """train.preflight writes ``to_dict()`` into rollout.custom (workers and servers read it back);
    the local server gets the object itself, pickled as Ray pickles an actor's arguments."""
    import pickle

    from omegaconf import OmegaConf
    cfg = OmegaConf.create({"rollout": {"custom": NON_DEFAULT.to_dict()}})
    OmegaConf.resolve(cfg)
    assert SoftSettings.from_dict(cfg.rollout.custom) == NON_DEFAULT
    assert pickle.loads(pickle.dumps(NON_DEFAULT)) == NON_DEFAULT
    cloudpickle = pytest.importorskip("ray.cloudpickle")
    assert cloudpickle.loads(cloudpickle.dumps(NON_DEFAULT)) == NON_DEFAULT


def test_the_sglang_scheduler_environment_carries_it(monkeypatch):
    from soft_spatial.engines.sglang.server_args import ENV_VAR, SchedulerSetup
    monkeypatch.delenv(ENV_VAR, raising=False)
    setup = SchedulerSetup(soft=NON_DEFAULT, hidden_size=32, think_end_id=9, banned_ids=[1, 2],
                           controller_path="/c.pt")
    setup.export()  # the verl server, before SGLang spawns its schedulers
    back = SchedulerSetup.from_env()  # each scheduler (hooks.runtime)
    assert back == setup and back.soft == NON_DEFAULT


def _fake_merger(actor, target):
    """verl's merger, writing only a config (the real one: tests/e2e/test_export_safety.py,
    tests/e2e/test_train_cpu.py)."""
    Path(target).mkdir(parents=True, exist_ok=True)
    (Path(target) / "config.json").write_text("{}")


def _compose_eval(overrides):
    from hydra import compose, initialize_config_dir

    from soft_spatial.eval.__main__ import CONFIG_DIR
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
        return compose(config_name="eval", overrides=list(overrides))


def _eval_view(s: SoftSettings) -> SoftSettings:
    """What evaluation holds of a run's settings: the groups (the rollout server's scalars and
    the replay check are training's; evaluation has its own seed and batch_rows)."""
    return SoftSettings(**{g: getattr(s, g) for g in EVAL_GROUPS})


def test_the_exported_settings_file_carries_it_to_evaluation(tmp_path, monkeypatch):
    """Written as training writes it, exported, read as evaluation reads it."""
    import soft_spatial.export as export_mod
    from soft_spatial.eval.__main__ import apply_exported, soft_settings
    from soft_spatial.softthink.settings import SETTINGS_FILE
    ckpt = tmp_path / "ckpt"
    actor = ckpt / "global_step_1" / "actor"
    actor.mkdir(parents=True)
    (actor / "model_world_size_1_rank_0.pt").write_bytes(b"")
    (ckpt / "latest_checkpointed_iteration.txt").write_text("1")
    NON_DEFAULT.save(ckpt / SETTINGS_FILE)  # train.run
    monkeypatch.setattr(export_mod, "run_merger", _fake_merger)
    out = export_mod.export(ckpt, tmp_path / "model")
    assert (out / SETTINGS_FILE).read_bytes() == (ckpt / SETTINGS_FILE).read_bytes()  # copied
    assert SoftSettings.exported(out) == NON_DEFAULT
    cfg = _compose_eval([f"model.path={out}"])
    apply_exported(cfg, [f"model.path={out}"])
    assert soft_settings(cfg) == _eval_view(NON_DEFAULT) and cfg.mode == "fixed"


def _hydra_value(v) -> str:
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(_hydra_value(x) for x in v) + "]"
    if v is None:
        return "null"
    if isinstance(v, bool):
        return str(v).lower()
    return f"'{v}'" if isinstance(v, str) else repr(v)


def test_evaluations_config_composes_into_it():
    """configs/eval.yaml's soft block, set through the groups as on the command line."""
    from soft_spatial.eval.__main__ import soft_settings
    overrides = [f"{g}.{k}={_hydra_value(v)}" for g in EVAL_GROUPS
                 for k, v in NON_DEFAULT.to_dict()[g].items()]
    assert soft_settings(_compose_eval(overrides)) == _eval_view(NON_DEFAULT)
    # mode= (the top-level key) still sets the mode
    assert soft_settings(_compose_eval(["mode=hard"])).soft_thinking.mode == "hard"
