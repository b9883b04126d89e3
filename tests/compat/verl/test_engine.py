"""verl's training engine internals (soft_spatial/compat/verl/engine.py): the actor config read back
from the worker's loss. (The soft engine's registration through the plugin:
tests/test_plugin.py; the engine itself: tests/actor/test_train_engine.py.)"""
import os

os.environ.setdefault("VERL_PLATFORM", "cpu")


def test_loss_config():
    from functools import partial

    import pytest

    from soft_spatial.compat.verl.engine import loss_config

    config = object()
    assert loss_config(partial(print, config=config)) is config
    with pytest.raises(RuntimeError, match="compat/verl/engine.py"):
        loss_config(print)
