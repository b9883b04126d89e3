"""verl's training engine internals (soft_spatial/compat/verl/engine.py): the actor config read back
from the worker's loss, and engine registration that adds what is missing, keeps what is there and
says so when a key is another class's. (The soft engine's registration through the plugin:
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


def test_register_engine_adds_each_missing_key_and_never_replaces_another_class():
    import warnings

    import pytest

    from soft_spatial.compat.verl.engine import engine_registry, register_engine
    from soft_spatial.integration.platform import use_cpu_platform

    use_cpu_platform()  # before verl's engine modules import
    from verl.workers.engine.base import BaseEngine

    registry, engines = engine_registry()

    class Mine(BaseEngine):
        pass

    class Theirs(BaseEngine):
        pass

    model_type = "compat_test_model"  # a key no other test registers
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # no clash reported
        register_engine(Mine, model_type, ["fsdp", "fsdp2"], ["cpu"])
        register_engine(Mine, model_type, ["fsdp", "fsdp2"], ["cpu", "cuda"])  # adds cuda only
    assert engines[model_type] == {b: {"cpu": Mine, "cuda": Mine} for b in ("fsdp", "fsdp2")}
    with pytest.warns(RuntimeWarning, match=r"\(compat_test_model, fsdp, cpu\) is already .*Mine; not "
                                            r"replacing it with .*Theirs"):
        register_engine(Theirs, model_type, ["fsdp"], ["cpu"])
    assert registry.get_engine_cls(model_type, "fsdp") is Mine
    del engines[model_type]
