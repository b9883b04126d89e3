"""What the GPU kit's stages share: their context, their Markdown report, device-synchronised
timing and peak memory, and random models built on the device."""
from __future__ import annotations

import platform
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

from soft_spatial.bench.gpu.context import free_memory  # noqa: F401  (re-exported for the stages)

__all__ = ["MODES", "Ctx", "Report", "sync", "timed", "PeakMemory", "free_memory", "random_model",
           "versions"]

MODES = ("hard", "fixed", "adaptsoft")


@dataclass
class Ctx:
    dry_run: bool
    quick: bool
    device: str
    report: "Report"
    workdir: Path
    notes: list = field(default_factory=list)

    @property
    def dtype(self):
        import torch
        return torch.float32 if self.dry_run else torch.bfloat16


class Report:
    """Markdown report, rewritten after every stage."""

    def __init__(self, path: Path, header: list[str]):
        self.path, self.header, self.sections = path, header, []

    def add(self, title: str, status: str, lines: list[str], seconds: float) -> None:
        self.sections.append([f"## {title}", "", f"**{status}** ({seconds:.0f} s)", ""] + lines + [""])
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text("\n".join(self.header + [x for s in self.sections for x in s]) + "\n")
        tmp.replace(self.path)


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
    """``Python 3.12.3, torch …, transformers …, verl …, ray …, sglang …`` (– where missing)."""
    out = [f"Python {platform.python_version()}"]
    for name in ("torch", "transformers", "verl", "ray", "sglang"):
        try:
            out.append(f"{name} {__import__(name).__version__}")
        except Exception:
            out.append(f"{name} –")
    return ", ".join(out)
