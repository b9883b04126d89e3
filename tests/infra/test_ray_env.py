"""The environment every Ray process of a run gets (`soft_spatial.infra.ray_env`): one list for
training, the rollout replicas and the launcher (which forwards it too:
tests/launch/test_plan.py::test_the_launch_plan_forwards_the_one_list)."""

from __future__ import annotations

import pytest

from launch_helpers import MIXED_ENV
from soft_spatial.infra.ray_env import FORWARD_ENV, PLUGIN, forward_names, forwarded_env, plugin_env


def test_one_forwarded_list_for_training_replicas_and_launcher():
    env = MIXED_ENV
    assert forwarded_env(env) == {"VERL_USE_EXTERNAL_MODULES": "other.mod", "HF_HUB_OFFLINE": "1",
                                  "PYTHONPATH": "/p", "NCCL_DEBUG": "INFO"}
    assert forward_names(env) == [*FORWARD_ENV, "NCCL_DEBUG", "WANDB_MODE"]
    assert plugin_env("cpu", env) == {**forwarded_env(env), "TOKENIZERS_PARALLELISM": "false",
                                      "VERL_USE_EXTERNAL_MODULES": f"other.mod,{PLUGIN}",
                                      "VERL_PLATFORM": "cpu"}
    assert plugin_env("cuda", {})["VERL_USE_EXTERNAL_MODULES"] == PLUGIN
    listed = plugin_env("cuda", {"VERL_USE_EXTERNAL_MODULES": f"{PLUGIN},x"})
    assert listed["VERL_USE_EXTERNAL_MODULES"] == f"{PLUGIN},x"  # listed once, in place
    with pytest.raises(ValueError, match="bad variable name 'A-B'"):
        forwarded_env({"SOFT_SPATIAL_FORWARD_ENV": "A-B"})
