"""glibc's allocator, kept from holding freed memory in long encoding loops.

glibc serves a large allocation (≥ 128 KiB) with its own ``mmap`` and returns it on ``free``, but
after the first such free it raises that threshold to the freed size, so later blocks of that
size come from the heap, where the small allocations that outlive them pin the heap's top: a
loop that makes one large temporary and keeps a few small objects per item grows by the
temporary's size per item. The warm start's encoding is such a loop (the processor's 0.9 MB of
pixel values per 192-pixel image, dropped, beside the kept token ids): 1.8 MB per record
measured, 0.2 MB with the threshold fixed. :func:`fix_mmap_threshold` fixes it (``mallopt``;
the same as ``MALLOC_MMAP_THRESHOLD_=131072`` in the environment).

A fixed small threshold must not outlive such a loop: every later tensor of ≥ 128 KiB then costs
a fresh ``mmap``, its page faults and zero fill, and ``munmap`` (PyTorch's CPU allocator does not
cache). The warm start's training step on the learning experiment's tiny model took 1.9× as long
with the threshold left fixed (2026-11-27, one thread, 538–563 against 285–296 ms per step).
:func:`large_blocks_mapped` fixes it for a block of code and then raises it to glibc's own ceiling
for the dynamic threshold, where the default settles once large blocks have been freed.
"""
from __future__ import annotations

import ctypes
import ctypes.util
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["fix_mmap_threshold", "large_blocks_mapped", "DYNAMIC_MAX"]

M_MMAP_THRESHOLD = -3  # glibc's malloc.h
#: glibc's ceiling for its dynamic threshold on 64-bit (``DEFAULT_MMAP_THRESHOLD_MAX``, 32 MiB)
DYNAMIC_MAX = 32 * 1024 * 1024


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


@contextmanager
def large_blocks_mapped(nbytes: int = 128 * 1024) -> Iterator[bool]:
    """Within the block, every allocation of at least ``nbytes`` by ``mmap``
    (:func:`fix_mmap_threshold`); on leaving it the threshold goes to :data:`DYNAMIC_MAX`, so the
    tensors of the code after it come from the heap again (glibc cannot switch its dynamic
    threshold back on; its ceiling is where that threshold settles). Yields whether the threshold
    was set (False where the C library is not glibc)."""
    fixed = fix_mmap_threshold(nbytes)
    try:
        yield fixed
    finally:
        if fixed:
            fix_mmap_threshold(DYNAMIC_MAX)
