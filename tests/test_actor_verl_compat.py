"""Fails loudly when verl changes the internals soft_spatial touches (trainer/verl_compat.py)."""
import os

os.environ.setdefault("VERL_PLATFORM", "cpu")


def test_pinned_verl_version():
    from soft_spatial.trainer.verl_compat import VERL_VERSION, check_verl_version

    assert check_verl_version(strict=True) == VERL_VERSION


def test_internals_we_touch_are_unchanged():
    from soft_spatial.trainer.platform import use_cpu_platform
    from soft_spatial.trainer.verl_compat import check_internals

    use_cpu_platform()  # VERL_PLATFORM=cpu: the platform must exist before verl's engines import

    assert check_internals() == []


def test_cpu_platform_selected_and_engines_registered():
    from soft_spatial.trainer.platform import PlatformCPU, use_cpu_platform

    use_cpu_platform()
    from verl.utils.device import (get_device_id, get_device_name, get_nccl_backend,
                                   get_resource_name, get_torch_device)
    from verl.workers.engine.base import EngineRegistry
    from verl.workers.engine.fsdp.transformer_impl import FSDPEngineWithLMHead

    assert (get_device_name(), get_nccl_backend(), get_resource_name()) == ("cpu", "gloo", "CPU")
    assert get_device_id() == "cpu"
    dev = get_torch_device()
    assert dev.max_memory_allocated() == 0 and dev.is_available()
    dev.empty_cache()
    assert EngineRegistry.get_engine_cls("language_model", "fsdp2") is FSDPEngineWithLMHead
    assert not PlatformCPU().is_platform_available(use_smi_check=True)  # never auto-detected


def test_register_is_idempotent():
    from soft_spatial.trainer.platform import register

    register()
    register()
    import soft_spatial.actor.engine as eng

    eng.register()
    eng.register()
