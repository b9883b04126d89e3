"""The settings group's old name on a command line (soft_spatial/infra/hydra_args.py): a selection
under the old name (``soft_thinking=paper``) ends the command in one line naming the new override,
before anything runs; a value override of the decoding settings (``soft_thinking.mode=fixed``, a
whole ``soft_thinking={...}``) passes and composes."""
from __future__ import annotations

import subprocess
import sys

import pytest
from hydra import compose, initialize_config_dir

from soft_spatial.infra.hydra_args import RenamedGroup, refuse_renamed
from soft_spatial.train import CONFIG_DIR


@pytest.mark.parametrize("old, new", [
    ("soft_thinking=paper", "soft=paper"),
    ("+soft_thinking=paper", "+soft=paper"),
    ("+soft_thinking@_global_=paper", "+soft@_global_=paper"),
    ("~soft_thinking", "~soft"),
])
def test_the_settings_groups_old_name_is_refused_naming_the_new_one(old, new):
    with pytest.raises(RenamedGroup) as e:
        refuse_renamed(["model=tiny", old, "soft_thinking.mode=fixed"], "cmd")
    assert str(e.value) == (f"cmd: the settings group 'soft_thinking' is now 'soft' (configs/soft/): "
                            f"write {new!r} for {old!r}")


def test_value_overrides_of_the_decoding_group_pass_and_compose():
    kept = ["soft_thinking.mode=fixed", "soft_thinking.top_k=4", "+soft_thinking.x=1",
            "actor_rollout_ref.rollout.custom.soft_thinking.mode=hard", "soft_thinking_x=1",
            "soft_thinking={mode:hard,top_k:3}", "soft_thinking=[a,b]", "soft_thinking='x y'"]
    refuse_renamed(kept, "cmd")
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
        cfg = compose(config_name="train", overrides=["model=tiny", "soft_thinking={mode:hard,top_k:3}"])
    assert (cfg.actor_rollout_ref.rollout.custom.soft_thinking.mode,
            cfg.actor_rollout_ref.rollout.custom.soft_thinking.top_k) == ("hard", 3)


def test_the_training_command_refuses_the_old_name_before_anything_runs(tmp_path):
    res = subprocess.run([sys.executable, "-m", "soft_spatial.train", "soft_thinking=paper",
                          f"trainer.default_local_dir={tmp_path / 'run'}"], capture_output=True,
                         text=True, timeout=120, cwd=tmp_path)
    assert res.returncode == 1 and not (tmp_path / "run").exists()
    assert res.stderr.strip().splitlines()[-1] == (
        "python -m soft_spatial.train: the settings group 'soft_thinking' is now 'soft' "
        "(configs/soft/): write 'soft=paper' for 'soft_thinking=paper'")
