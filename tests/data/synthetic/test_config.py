"""What to generate (soft_spatial/data/synthetic/config.py): every task on its own OmniSpatial
sub-task of the real taxonomy, and every knob that cannot be drawn refused with an error naming it."""
from __future__ import annotations

import pytest

from soft_spatial.data.omnispatial import TAXONOMY
from soft_spatial.data.synthetic import (ALL_TASKS, PATH_TASKS, SUB_TASK_TO_TASK, TASKS, Difficulty,
                                         PathKnobs, SyntheticConfig)


def test_each_task_has_its_own_omnispatial_sub_task():
    assert set(ALL_TASKS) == set(TASKS) | set(PATH_TASKS) and len(ALL_TASKS) == 8
    for task, (task_type, sub) in ALL_TASKS.items():
        assert sub in TAXONOMY[task_type], task
        assert SUB_TASK_TO_TASK[sub] == task  # one task per sub-task: per-sub-task is per-task
    assert SyntheticConfig().tasks == tuple(TASKS)  # the path tasks only when asked for


@pytest.mark.parametrize("make,match", [
    (lambda: PathKnobs(grid=5), "path grid"),
    (lambda: PathKnobs(window=(0, 3)), "path window"),
    (lambda: PathKnobs(moves=6, window=(3, 6)), "path window"),
    (lambda: PathKnobs(blocks=4), "path blocks"),
    (lambda: PathKnobs(pool_factor=0), "pool_factor"),
    (lambda: SyntheticConfig(tasks=()), "unknown synthetic tasks"),
    (lambda: SyntheticConfig(size=100, tasks=("path_known",)), "path tasks"),
    (lambda: SyntheticConfig(size=96, tasks=("path_known",), paths=PathKnobs(grid=4)), None),
    (lambda: SyntheticConfig(options=(1, 2)), "option counts"),
    (lambda: SyntheticConfig(size=16, layout="free"), "at least 32"),
    (lambda: SyntheticConfig(layout="diagonal"), "layout"),
    (lambda: SyntheticConfig(size=64), "3x3 cells"),
    (lambda: SyntheticConfig(describe=True, layout="free"), "describe=True"),
    (lambda: SyntheticConfig(option_order="sorted"), "option_order"),
    (lambda: SyntheticConfig(difficulty=Difficulty(max_count=1)), "max_count"),
])
def test_a_config_that_cannot_be_drawn_is_refused(make, match):
    if match is None:  # the boundary case is allowed
        make()
        return
    with pytest.raises(ValueError, match=match):
        make()
