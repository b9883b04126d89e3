"""Import-only sgl_kernel stand-in (SGLang's CUDA kernel package) for SGLang's modules on a CPU (see ../README.md)."""
from __future__ import annotations

from _stub_support import SubmoduleFinder, UnavailableModule, install, submodule_getattr

__version__ = "0.3.21+stub"
STUB = True

install(SubmoduleFinder("sgl_kernel", UnavailableModule))
__getattr__ = submodule_getattr("sgl_kernel")
