"""The pinned SGLang version, and :func:`missing`, what every module's ``problems()`` reads
SGLang's sources with (the package's ``check_internals`` asks each of them). Imports sglang only
inside functions."""
from __future__ import annotations

import inspect

__all__ = ["SUPPORTED_SGLANG", "check_version", "missing"]

SUPPORTED_SGLANG = "0.5.12"


def check_version() -> str:
    """Raise ImportError unless sglang is installed at the supported version (the hook targets
    and every function below are version-specific)."""
    import sglang

    if sglang.__version__ != SUPPORTED_SGLANG:
        raise ImportError(f"soft_spatial's SGLang plugin supports sglang=={SUPPORTED_SGLANG}, "
                          f"found {sglang.__version__}")
    return sglang.__version__


def missing(facts, what: str) -> list:
    """One problem per needle missing from its function's source (``facts``: (function,
    needles) pairs)."""
    problems = []
    for fn, needles in facts:
        src = inspect.getsource(getattr(fn, "__wrapped__", fn))
        for needle in needles:
            if needle not in src:
                problems.append(f"sglang {fn.__qualname__} no longer contains {needle!r} "
                                f"({what}, docs/sglang.md)")
    return problems
