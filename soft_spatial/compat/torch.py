"""Touches of PyTorch's own names, one function per touch (for diagnostics only)."""
from __future__ import annotations

import contextlib

import torch

__all__ = ["refuse_tensor_to_device"]


@contextlib.contextmanager
def refuse_tensor_to_device(message: str):
    """Within the block, ``torch.tensor(..., device=<not the CPU>)`` raises ``RuntimeError(message)``
    (a blocking host-to-device copy); any other call goes through unchanged.

    Touches the module attribute ``torch.tensor`` (torch 2.11 on the GPU machines, 2.14 here), for
    the block only: restored on exit, also after an exception. Used by the GPU kit's sampler check
    (``bench/gpu/sampler_sync.py``); guarded by ``tests/compat/test_torch.py``."""
    tensor = torch.tensor

    def host_tensor(*args, **kwargs):
        device = kwargs.get("device")
        if device is not None and torch.device(device).type != "cpu":
            raise RuntimeError(message)
        return tensor(*args, **kwargs)

    torch.tensor = host_tensor
    try:
        yield
    finally:
        torch.tensor = tensor
