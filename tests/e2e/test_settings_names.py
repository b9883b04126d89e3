"""One name per thing: the soft settings are ``soft`` (Hydra group ``configs/soft/``, the run's
``soft_settings.yaml``, evaluation's ``soft`` block) and ``top_k`` is K; the old names still read
(docs/design.md §6)."""
from __future__ import annotations

import re

import pytest
from hydra import compose, initialize_config_dir

from soft_spatial.infra.hydra_args import rename_argv, renamed_overrides
from soft_spatial.softthink.settings import (OLD_SETTINGS_FILES, SETTINGS_FILE, SoftSettings,
                                             settings_file)
from soft_spatial.train import CONFIG_DIR


@pytest.mark.parametrize("old, new", [
    ("soft_thinking=paper", "soft=paper"),
    ("+soft_thinking=paper", "+soft=paper"),
    ("+soft_thinking@_global_=paper", "+soft@_global_=paper"),
    ("~soft_thinking", "~soft"),
])
def test_the_settings_groups_old_name_reads_as_the_new_one(old, new):
    told = []
    assert renamed_overrides(["model=tiny", old, "soft_thinking.mode=fixed"], told.append) == \
        ["model=tiny", new, "soft_thinking.mode=fixed"]
    (line,) = told
    assert "'soft'" in line and "configs/soft/" in line and old in line


def test_value_overrides_of_the_decoding_group_are_untouched():
    kept = ["soft_thinking.mode=fixed", "soft_thinking.top_k=4", "+soft_thinking.x=1",
            "actor_rollout_ref.rollout.custom.soft_thinking.mode=hard", "soft_thinking_x=1",
            # a whole value of the decoding group: read as soft={...}, it failed, and so did the hint
            "soft_thinking={mode:hard,top_k:3}", "soft_thinking=[a,b]", "soft_thinking='x y'"]
    assert renamed_overrides(kept, lambda line: pytest.fail(line)) == kept
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
        cfg = compose(config_name="train", overrides=["model=tiny", "soft_thinking={mode:hard,top_k:3}"])
    assert (cfg.actor_rollout_ref.rollout.custom.soft_thinking.mode,
            cfg.actor_rollout_ref.rollout.custom.soft_thinking.top_k) == ("hard", 3)


def test_old_group_override_composes_like_the_new_one(capsys):
    argv = ["python", "soft_thinking=paper", "soft_thinking.mode=fixed"]
    rename_argv(argv)
    assert argv == ["python", "soft=paper", "soft_thinking.mode=fixed"]
    assert "is now 'soft'" in capsys.readouterr().err
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
        new = compose(config_name="train", overrides=["model=tiny", *argv[1:]])
        default = compose(config_name="train", overrides=["model=tiny", "soft_thinking.mode=fixed"])
    assert new == default
    assert new.actor_rollout_ref.rollout.custom.soft_thinking.mode == "fixed"


def test_the_runs_settings_file_is_read_under_its_old_name(tmp_path):
    assert SETTINGS_FILE == "soft_settings.yaml" and "soft_thinking.yaml" in OLD_SETTINGS_FILES
    assert settings_file(tmp_path) is None and SoftSettings.exported(tmp_path) is None
    SoftSettings.from_dict({"soft_thinking": {"mode": "fixed"}}).save(tmp_path / "soft_thinking.yaml")
    assert settings_file(tmp_path) == tmp_path / "soft_thinking.yaml"
    assert SoftSettings.exported(tmp_path).soft_thinking.mode == "fixed"
    SoftSettings.from_dict({"soft_thinking": {"mode": "hard"}}).save(tmp_path / SETTINGS_FILE)
    assert SoftSettings.exported(tmp_path).soft_thinking.mode == "hard"  # the new name first


def test_export_finds_an_old_runs_settings_file(tmp_path):
    from soft_spatial.export import settings_file as export_settings
    actor = tmp_path / "global_step_2" / "actor"
    actor.mkdir(parents=True)
    SoftSettings().save(tmp_path / "soft_thinking.yaml")
    assert export_settings(actor) == tmp_path / "soft_thinking.yaml"


def _eval(*overrides):
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
        return compose(config_name="eval", overrides=list(overrides))


def test_top_k_is_K_and_evaluations_filter_is_sample_top_k(capsys):
    from soft_spatial.eval.__main__ import sample_top_k
    cfg = _eval()
    assert cfg.sample_top_k == 5 and cfg.soft.soft_thinking.top_k == 5 and cfg.top_k is None
    assert sample_top_k(_eval("sample_top_k=0")) == 0
    assert capsys.readouterr().err == ""
    # the old key: read as sample_top_k, with a warning naming the new key
    assert sample_top_k(_eval("top_k=0")) == 0
    err = capsys.readouterr().err
    assert re.search(r"top_k=0 is the old name of sample_top_k.*write sample_top_k=0", err)
