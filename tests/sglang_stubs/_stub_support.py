"""Shared machinery of the import-only stand-ins in this folder (see README.md).

Each stub package makes every ``<pkg>.<anything>`` submodule importable as a module whose
unknown attributes are placeholders, through one :class:`SubmoduleFinder` on ``sys.meta_path``.
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import os
import sys
import types
from collections.abc import Callable

CALLS_ENV = "SOFT_SPATIAL_STUB_CALLS"  # file that records every call of a placeholder


class Unavailable:
    """Placeholder: any attribute is another placeholder (enum members such as
    ``transforms.InterpolationMode.NEAREST_EXACT`` evaluate); calling one raises."""

    def __init__(self, name: str, package: str):
        self._name, self._package = name, package

    def __getattr__(self, item):
        if item.startswith("__") and item.endswith("__"):
            raise AttributeError(item)
        return Unavailable(f"{self._name}.{item}", self._package)

    def __call__(self, *args, **kwargs):
        log = os.environ.get(CALLS_ENV)
        if log:  # a caller may catch the error below: the tests read this file instead
            with open(log, "a") as f:
                f.write(self._name + "\n")
        raise RuntimeError(f"{self._name} is a stub (tests/sglang_stubs): {self._package} is "
                           f"not installed in this environment")

    def __hash__(self):
        return hash(self._name)

    def __eq__(self, other):
        return isinstance(other, Unavailable) and other._name == self._name

    def __repr__(self):
        return f"<stub {self._name}>"


class UnavailableModule(types.ModuleType):
    """A stub submodule whose every public attribute is an :class:`Unavailable`."""

    def __getattr__(self, item):
        if item.startswith("__") and item.endswith("__"):
            raise AttributeError(item)
        return Unavailable(f"{self.__name__}.{item}", self.__name__.split(".")[0])


class SubmoduleFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Makes every ``<package>.<anything>`` importable as a ``module_cls`` instance;
    ``on_exec(module)`` may add real attributes."""

    def __init__(self, package: str, module_cls: type[types.ModuleType],
                 on_exec: Callable[[types.ModuleType], None] | None = None):
        self.package, self.module_cls, self.on_exec = package, module_cls, on_exec

    def find_spec(self, fullname, path=None, target=None):
        if fullname.startswith(self.package + "."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        mod = self.module_cls(spec.name)
        mod.__path__ = []
        return mod

    def exec_module(self, module):
        if self.on_exec is not None:
            self.on_exec(module)


def install(finder: SubmoduleFinder) -> None:
    """Put ``finder`` first on ``sys.meta_path`` (once per package)."""
    if not any(isinstance(f, SubmoduleFinder) and f.package == finder.package
               for f in sys.meta_path):
        sys.meta_path.insert(0, finder)


def submodule_getattr(package: str) -> Callable[[str], types.ModuleType]:
    """A module-level ``__getattr__`` that resolves ``<package>.<item>`` to its stub submodule."""

    def __getattr__(item):
        if item.startswith("__") and item.endswith("__"):
            raise AttributeError(item)
        return importlib.import_module(f"{package}.{item}")

    return __getattr__
