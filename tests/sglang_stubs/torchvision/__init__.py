"""Import-only torchvision stand-in for SGLang's modules on a CPU (see ../README.md)."""
from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types

__version__ = "0.0.0+stub"
STUB = True


class _unavailable:
    """Placeholder: any attribute is another placeholder (enum members such as
    ``transforms.InterpolationMode.NEAREST_EXACT`` evaluate); calling one raises."""

    def __init__(self, name):
        self._name = name

    def __getattr__(self, item):
        if item.startswith("__") and item.endswith("__"):
            raise AttributeError(item)
        return _unavailable(f"{self._name}.{item}")

    def __call__(self, *args, **kwargs):
        raise RuntimeError(f"{self._name} is a stub (tests/sglang_stubs): torchvision is not "
                           f"installed in this environment")

    def __hash__(self):
        return hash(self._name)

    def __eq__(self, other):
        return isinstance(other, _unavailable) and other._name == self._name

    def __repr__(self):
        return f"<stub {self._name}>"


class _StubModule(types.ModuleType):
    def __getattr__(self, item):
        if item.startswith("__") and item.endswith("__"):
            raise AttributeError(item)
        return _unavailable(f"{self.__name__}.{item}")


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path=None, target=None):
        if fullname.startswith("torchvision."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        mod = _StubModule(spec.name)
        mod.__path__ = []
        return mod

    def exec_module(self, module):
        pass


if not any(isinstance(f, _Finder) for f in sys.meta_path):
    sys.meta_path.insert(0, _Finder())


def __getattr__(item):
    if item.startswith("__") and item.endswith("__"):
        raise AttributeError(item)
    import importlib
    return importlib.import_module(f"torchvision.{item}")
