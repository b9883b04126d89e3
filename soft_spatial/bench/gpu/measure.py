"""How the GPU kit measures on a device: its modes, device-synchronised timing, peak memory,
random models built on the device, the versions a report names."""
from __future__ import annotations

import platform
import statistics
import time

__all__ = ["MODES", "sync", "timed", "PeakMemory", "random_model", "versions"]

MODES = ("hard", "fixed", "adaptsoft")


def sync(device: str) -> None:
    import torch
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def timed(fn, device: str, repeats: int, warmup: int = 1):
    """(median seconds, min seconds, last result) of ``fn()`` after ``warmup`` calls."""
    for _ in range(warmup):
        fn()
    times, out = [], None
    for _ in range(repeats):
        sync(device)
        t0 = time.perf_counter()
        out = fn()
        sync(device)
        times.append(time.perf_counter() - t0)
    return statistics.median(times), min(times), out


class PeakMemory:
    """Peak device memory (MiB) allocated inside the block above what was allocated before it."""

    def __init__(self, device: str):
        self.device, self.mib = device, float("nan")

    def __enter__(self):
        import torch
        if self.device.startswith("cuda"):
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            self.base = torch.cuda.memory_allocated()
        return self

    def __exit__(self, *exc):
        import torch
        if self.device.startswith("cuda"):
            torch.cuda.synchronize()
            self.mib = (torch.cuda.max_memory_allocated() - self.base) / 2 ** 20


def random_model(config, device: str, dtype, seed: int = 0):
    """A model of ``config`` with random weights, built directly on ``device`` (no download)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText

    from soft_spatial.models.loading import is_vision_language
    auto = AutoModelForImageTextToText if is_vision_language(config) else AutoModelForCausalLM
    torch.manual_seed(seed)
    with torch.device(device):
        model = auto.from_config(config, dtype=dtype, attn_implementation="sdpa")
    return model.eval()


def versions() -> str:
    """``Python 3.12.3, torch …, transformers …, verl …, ray …, sglang …`` (– where missing): the
    installed distributions' versions, read without importing them (importing all five took 5 s
    of CPU before a dry run's first job), but torch's from the module when it is imported (its
    build, e.g. ``+cu130``, which a wheel's metadata may leave out; the header imports it on a
    GPU), and a package's own ``__version__`` where its distribution is not found."""
    import sys
    from importlib import metadata
    out = [f"Python {platform.python_version()}"]
    for name in ("torch", "transformers", "verl", "ray", "sglang"):
        try:
            if name in sys.modules:
                version = sys.modules[name].__version__
            else:
                try:
                    version = metadata.version(name)
                except metadata.PackageNotFoundError:
                    version = __import__(name).__version__
            out.append(f"{name} {version}")
        except Exception:
            out.append(f"{name} –")
    return ", ".join(out)
