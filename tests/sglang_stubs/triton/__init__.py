"""Import-only triton stand-in for SGLang's modules on a CPU (see ../README.md). Not real triton."""
from __future__ import annotations

import math
import types

from _stub_support import SubmoduleFinder, install

__version__ = "3.5.0"
STUB = True  # lets a test tell the stand-in from the real package


class _Placeholder:
    """Any attribute, call, subscription or operation gives another placeholder."""

    def __init__(self, name="triton.<placeholder>"):
        self._name = name

    def __getattr__(self, item):
        if item.startswith("__") and item.endswith("__"):
            raise AttributeError(item)
        return _Placeholder(f"{self._name}.{item}")

    def __call__(self, *args, **kwargs):
        if len(args) == 1 and callable(args[0]) and not kwargs:
            return args[0]  # used as a decorator
        return _Placeholder(f"{self._name}()")

    def __getitem__(self, item):
        return _Placeholder(f"{self._name}[]")

    def __repr__(self):
        return f"<stub {self._name}>"

    def __mro_entries__(self, bases):
        return (object,)


def _decorator(fn=None, **kwargs):
    """``@jit`` / ``@jit(...)``: returns the function unchanged (never compiled)."""
    if fn is not None and callable(fn):
        return fn
    return lambda f: f


def _factory_decorator(*args, **kwargs):
    """``@autotune(...)`` / ``@heuristics(...)``: identity decorator."""
    return lambda f: f


jit = _decorator
autotune = _factory_decorator
heuristics = _factory_decorator


def cdiv(x, y):
    return (x + y - 1) // y


def next_power_of_2(n):
    return 1 if n <= 1 else 1 << math.ceil(math.log2(n))


class Config:
    def __init__(self, kwargs=None, num_warps=4, num_stages=2, **extra):
        self.kwargs, self.num_warps, self.num_stages = dict(kwargs or {}), num_warps, num_stages
        self.__dict__.update(extra)


class _Driver:
    @property
    def active(self):
        raise RuntimeError("0 active drivers ([]). There should only be one. (triton stub: no GPU)")


class _StubModule(types.ModuleType):
    """CamelCase names are (empty) classes, so ``isinstance(x, triton.runtime.jit.JITFunction)``
    works (torch does that); other names are placeholders."""

    def __getattr__(self, item):
        if item.startswith("__") and item.endswith("__"):
            raise AttributeError(item)
        if item[:1].isupper():
            value = type(item, (), {"__module__": self.__name__})
            setattr(self, item, value)
            return value
        return _Placeholder(f"{self.__name__}.{item}")


def _exec(module):
    if module.__name__ == "triton.runtime":
        module.driver = _Driver()
    if module.__name__ == "triton.runtime.driver":
        module.active = _Driver().__class__.active  # attribute access on the module is enough
    if module.__name__ == "triton.language":
        module.constexpr = _Placeholder("triton.language.constexpr")


# every triton.<anything> submodule imports as a _StubModule
install(SubmoduleFinder("triton", _StubModule, _exec))


def __getattr__(item):  # module-level: triton.<anything else>
    if item.startswith("__") and item.endswith("__"):
        raise AttributeError(item)
    if item in ("language", "runtime", "testing", "tools", "backends"):
        import importlib
        return importlib.import_module(f"triton.{item}")
    return _Placeholder(f"triton.{item}")
