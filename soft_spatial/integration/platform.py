"""A CPU platform for verl 0.9.1 (``VERL_PLATFORM=cpu``).

verl 0.9.1 resolves the device through ``verl.plugin.platform`` (``PlatformRegistry``); only
nvidia / huawei / amd are registered and detection falls back to ``nvidia``, so on a CPU machine
verl reports device ``cuda`` and backend ``nccl``. :class:`PlatformCPU` is registered under the name
``cpu``: device ``"cpu"``, backend ``gloo``, Ray resource ``CPU``, and no-op memory / profiler /
nvtx / cudart stubs. :func:`register` also registers verl's stock FSDP engines for device ``cpu``
(verl keys ``EngineRegistry`` by device and registers them for cuda/npu only).

Select it with ``VERL_PLATFORM=cpu`` before the first ``verl.plugin.platform.get_platform()`` call
(or :func:`use_cpu_platform`). ``current_device()`` returns the string ``"cpu"`` so that verl's
``tensor.to(get_device_id())`` works.

verl's ``initialize_global_process_group*`` builds the backend ``"cpu:gloo,<device>:<backend>"``,
which is invalid for device ``cpu``; initialise the process group first with
:func:`init_process_group` (verl then skips its own initialisation).
"""
from __future__ import annotations

import contextlib
import os
import types
from typing import Any

import torch
from verl.plugin.platform import PlatformBase, PlatformRegistry

__all__ = ["PlatformCPU", "cpu_device_module", "register", "register_platform", "use_cpu_platform",
           "init_process_group", "loopback_store", "PLATFORM_NAME"]

PLATFORM_NAME = "cpu"


def _zero(*args, **kwargs) -> int:
    return 0


def _noop(*args, **kwargs) -> None:
    return None


def _mem_get_info(*args, **kwargs):
    try:
        import psutil

        vm = psutil.virtual_memory()
        return vm.available, vm.total
    except Exception:  # pragma: no cover
        return 0, 0


class _CPUDeviceModule(types.ModuleType):
    """``torch.cpu`` plus the ``torch.cuda``-style calls verl makes on ``get_torch_device()``
    (memory statistics, cache, seeding, IPC), as harmless stubs."""

    def __init__(self):
        super().__init__("soft_spatial_cpu_device")
        self.is_available = lambda: True
        self.current_device = lambda: "cpu"
        self.device_count = lambda: 1
        self.set_device = _noop
        self.synchronize = _noop
        self.empty_cache = _noop
        self.ipc_collect = _noop
        self.reset_peak_memory_stats = _noop
        self.set_per_process_memory_fraction = _noop
        for name in ("memory_allocated", "memory_reserved", "max_memory_allocated",
                     "max_memory_reserved"):
            setattr(self, name, _zero)
        self.memory_stats = lambda *a, **k: {}
        self.mem_get_info = _mem_get_info
        self.manual_seed = lambda seed: torch.manual_seed(seed)
        self.manual_seed_all = lambda seed: torch.manual_seed(seed)
        self.get_rng_state = lambda *a, **k: torch.get_rng_state()
        self.set_rng_state = lambda state, *a, **k: torch.set_rng_state(state)
        self.get_device_name = lambda *a, **k: "cpu"
        self.nvtx = types.SimpleNamespace(range=lambda msg: contextlib.nullcontext(),
                                          range_push=_noop, range_pop=_noop)

    def __getattr__(self, name: str) -> Any:  # everything else: torch.cpu
        return getattr(torch.cpu, name)


cpu_device_module = _CPUDeviceModule()


class PlatformCPU(PlatformBase):
    """verl platform for a machine without accelerators (tests, CI)."""

    @property
    def device_name(self) -> str:
        return "cpu"

    @property
    def vendor_name(self) -> str:
        return "cpu"

    @property
    def device_module(self) -> types.ModuleType:
        return cpu_device_module

    def is_available(self) -> bool:
        return True

    def is_platform_available(self, use_smi_check=False) -> bool:
        # Never auto-detected: a CPU machine must opt in (VERL_PLATFORM=cpu), so a GPU machine
        # with this plugin loaded keeps verl's own detection.
        return False

    def current_device(self):  # a str, so that tensor.to(get_device_id()) works
        return "cpu"

    def device_count(self) -> int:
        return 1

    def set_device(self, device_index: int) -> None:
        return None

    def synchronize(self, device_index: int | None = None) -> None:
        return None

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        torch.manual_seed(seed)

    def set_allocator_settings(self, settings: str) -> None:
        return None

    def empty_cache(self) -> None:
        return None

    def get_device_capability(self, device_index: int = 0):
        return None, None

    def communication_backend_name(self) -> str:
        return "gloo"

    def visible_devices_envvar(self) -> str:
        return "CUDA_VISIBLE_DEVICES"

    @contextlib.contextmanager
    def nvtx_range(self, msg: str):
        yield

    def profiler_start(self) -> None:
        return None

    def profiler_stop(self) -> None:
        return None

    def ray_resource_name(self) -> str:
        return "CPU"

    def ray_resource_options(self, num_gpus: float) -> dict:
        return {"num_cpus": num_gpus}

    def ray_noset_envvars(self) -> list:
        return []

    def is_ipc_supported(self) -> bool:
        return False

    def cudart(self) -> Any:
        return None


def register_platform() -> None:
    """Make ``VERL_PLATFORM=cpu`` resolve: :class:`PlatformCPU` in verl's ``PlatformRegistry``
    (idempotent; it is never auto-detected, see ``is_platform_available``)."""
    if PlatformRegistry.get(PLATFORM_NAME) is not PlatformCPU:
        PlatformRegistry.register(platform=PLATFORM_NAME)(PlatformCPU)


def register() -> None:
    """Register the CPU platform and verl's stock FSDP engines for device ``cpu`` (idempotent).

    Select the platform (``VERL_PLATFORM=cpu`` or :func:`use_cpu_platform`) *before* this imports
    verl's FSDP engine module: that module reads the device name at import time.
    """
    register_platform()  # first: verl's FSDP engine module reads the device at import
    from verl.workers.engine.fsdp.transformer_impl import FSDPEngineWithLMHead, FSDPEngineWithValueHead

    from soft_spatial.compat.verl.engine import register_engine

    register_engine(FSDPEngineWithLMHead, "language_model", ["fsdp", "fsdp2"], ["cpu"])
    register_engine(FSDPEngineWithValueHead, "value_model", ["fsdp", "fsdp2"], ["cpu"])


def use_cpu_platform() -> PlatformBase:
    """Register, select and return the CPU platform in this process (also sets
    ``VERL_PLATFORM=cpu`` so that child processes select it)."""
    from verl.plugin.platform import get_platform, set_platform

    register_platform()
    os.environ["VERL_PLATFORM"] = PLATFORM_NAME
    platform = get_platform()
    if not isinstance(platform, PlatformCPU):
        platform = PlatformCPU()
        set_platform(platform)
    register()
    return platform


def init_process_group(rank: int, world_size: int, init_method: str, timeout_s: float = 600):
    """Initialise a gloo process group (before verl's own, which then becomes a no-op). An
    ``env://`` rendezvous whose ``MASTER_ADDR`` is the loopback address (a local Ray run: the
    node's address is 127.0.0.1) is served on it alone (`loopback_store`)."""
    import datetime

    import torch.distributed as dist

    if dist.is_initialized():
        return
    timeout = datetime.timedelta(seconds=timeout_s)
    addr = os.environ.get("MASTER_ADDR", "")
    if init_method == "env://" and addr in ("127.0.0.1", "localhost"):
        store = loopback_store(rank, world_size, int(os.environ["MASTER_PORT"]), timeout)
        dist.init_process_group("gloo", store=store, rank=rank, world_size=world_size, timeout=timeout)
        return
    dist.init_process_group("gloo", init_method=init_method, rank=rank, world_size=world_size,
                            timeout=timeout)


def loopback_store(rank: int, world_size: int, port: int, timeout):
    """torch.distributed's rendezvous store on ``127.0.0.1:port``, listening there only: rank 0
    serves it on a socket it binds to the loopback address (torch's TCPStore, given no socket,
    listens on every interface), the other ranks connect to it."""
    import socket

    from torch.distributed import TCPStore

    if rank != 0:
        return TCPStore("127.0.0.1", port, world_size, False, timeout=timeout)
    fd = socket.create_server(("127.0.0.1", port)).detach()  # the store owns the socket from here
    try:
        return TCPStore("127.0.0.1", port, world_size, True, timeout=timeout, wait_for_workers=False,
                        master_listen_fd=fd, use_libuv=True)
    except BaseException:
        socket.close(fd)
        raise
