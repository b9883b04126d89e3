"""glibc's allocator, kept from holding freed memory in long encoding loops.

glibc serves a large allocation (≥ 128 KiB) with its own ``mmap`` and returns it on ``free``, but
after the first such free it raises that threshold to the freed size, so later blocks of that
size come from the heap, where the small allocations that outlive them pin the heap's top: a
loop that makes one large temporary and keeps a few small objects per item grows by the
temporary's size per item. The warm start's encoding is such a loop (the processor's 0.9 MB of
pixel values per 192-pixel image, dropped, beside the kept token ids): 1.8 MB per record
measured, 0.2 MB with the threshold fixed. :func:`fix_mmap_threshold` fixes it (``mallopt``;
the same as ``MALLOC_MMAP_THRESHOLD_=131072`` in the environment).
"""
from __future__ import annotations

import ctypes
import ctypes.util

__all__ = ["fix_mmap_threshold"]

M_MMAP_THRESHOLD = -3  # glibc's malloc.h


def fix_mmap_threshold(nbytes: int = 128 * 1024) -> bool:
    """Serve every allocation of at least ``nbytes`` by ``mmap`` (and disable glibc's dynamic
    threshold). Returns False where the C library is not glibc (nothing changed)."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError, TypeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, int(nbytes)))
