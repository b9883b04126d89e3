"""Import-only torchvision stand-in for SGLang's modules on a CPU (see ../README.md)."""
from __future__ import annotations

from _stub_support import SubmoduleFinder, UnavailableModule, install, submodule_getattr

__version__ = "0.0.0+stub"
STUB = True

install(SubmoduleFinder("torchvision", UnavailableModule))
__getattr__ = submodule_getattr("torchvision")
