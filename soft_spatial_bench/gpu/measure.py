"""What the GPU kit's measurements share: the decoding modes, the versions a report names (the
timing, peak-memory and random-model helpers of the retired first checks left with them after
58b8ea7)."""
from __future__ import annotations

import platform

__all__ = ["MODES", "versions"]

MODES = ("hard", "fixed", "adaptsoft")


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
