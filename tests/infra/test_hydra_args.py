"""The settings group's old name on a command line (soft_spatial/infra/hydra_args.py):
``soft_thinking=paper`` selects ``configs/soft/`` as ``soft=paper`` does, with one line saying so,
and composes the same configuration; a value override of the decoding settings
(``soft_thinking.mode=fixed``, a whole ``soft_thinking={...}``) is left as it is."""
from __future__ import annotations

import pytest
from hydra import compose, initialize_config_dir

from soft_spatial.infra.hydra_args import rename_argv, renamed_overrides
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
