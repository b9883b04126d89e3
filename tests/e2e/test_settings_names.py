"""One name per thing: the soft settings are ``soft`` (Hydra group ``configs/soft/``, the run's
``soft_settings.yaml``, evaluation's ``soft`` block) and ``top_k`` is K; a settings file under its
old name is refused naming the new one (docs/design.md §6). The old group name on a command line:
tests/infra/test_hydra_args.py."""
from __future__ import annotations

import re

import pytest
from hydra import compose, initialize_config_dir

from soft_spatial.softthink.settings import (OLD_SETTINGS_FILE, SETTINGS_FILE, SoftSettings,
                                             settings_file)
from soft_spatial.train import CONFIG_DIR


def test_a_settings_file_under_its_old_name_is_refused_naming_the_new(tmp_path):
    from soft_spatial.export import settings_file as export_settings
    assert SETTINGS_FILE == "soft_settings.yaml" and OLD_SETTINGS_FILE == "soft_thinking.yaml"
    assert settings_file(tmp_path) is None and SoftSettings.exported(tmp_path) is None
    SoftSettings.from_dict({"soft_thinking": {"mode": "fixed"}}).save(tmp_path / OLD_SETTINGS_FILE)
    with pytest.raises(FileNotFoundError, match="soft_thinking.yaml: .*rename it soft_settings.yaml"):
        SoftSettings.exported(tmp_path)
    actor = tmp_path / "run" / "global_step_2" / "actor"
    actor.mkdir(parents=True)
    (tmp_path / OLD_SETTINGS_FILE).rename(tmp_path / "run" / OLD_SETTINGS_FILE)
    with pytest.raises(FileNotFoundError, match="rename it soft_settings.yaml"):
        export_settings(actor)
    SoftSettings.from_dict({"soft_thinking": {"mode": "hard"}}).save(tmp_path / "run" / SETTINGS_FILE)
    assert export_settings(actor) == tmp_path / "run" / SETTINGS_FILE  # the new name: read


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
