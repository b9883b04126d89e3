"""The CPU platform every verl test runs on (soft_spatial/integration/platform.py): selected, verl's
device helpers answer for the CPU, the stock FSDP engines are registered for it, it is never
auto-detected, and registration is idempotent."""
import os

os.environ.setdefault("VERL_PLATFORM", "cpu")


def test_cpu_platform_selected_and_engines_registered():
    from soft_spatial.integration.platform import PlatformCPU, use_cpu_platform

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
    from soft_spatial.integration.platform import register

    register()
    register()
    import soft_spatial.actor.train_engine as eng

    eng.register()
    eng.register()
