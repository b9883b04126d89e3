"""The decode step's noise as one fused kernel on a GPU (no sglang import).

Per row the step reads its slot's premixed seed and step, draws the step's K+1 uniforms
(:func:`~soft_spatial.softthink.noise.step_uniforms`: the splitmix64 chain, the noise contract
with every engine and every recorded trace) and advances the slot's step. In PyTorch ops that is
~36 small kernels (the 64-bit mixing alone is ~30: add, shifts, masks, xors, products); this
Triton kernel does all of it in one launch, with the same integer arithmetic — unsigned 64-bit
products wrap as the int64 ones do, shifts are logical — so the uniforms are the same bits
(checked against :func:`~soft_spatial.softthink.noise.step_uniforms` by the tests with Triton's
interpreter on the CPU, and on a GPU by the kit's ``X/sampler`` before it times anything).

:func:`slot_uniforms` is what the sampler calls: the kernel on CUDA where Triton compiles it,
else (the CPU, or a kernel that fails to build, said once) the PyTorch ops.
"""
from __future__ import annotations

import logging
import os

import torch
from torch import Tensor

from soft_spatial.softthink.noise import step_uniforms

__all__ = ["slot_uniforms", "slot_uniforms_torch", "fused_available"]

logger = logging.getLogger(__name__)

try:  # Triton ships with torch's CUDA builds; absent elsewhere
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - depends on the install
    triton = None

_state = {"broken": None}


def slot_uniforms_torch(seed_mix: Tensor, step: Tensor, slots: Tensor, n: int
                        ) -> tuple[Tensor, Tensor]:
    """The PyTorch ops: (uniforms ``[b, n]``, each row's step ``[b]``); the slots' steps
    advanced."""
    rows_step = step[slots]
    u = step_uniforms(seed_mix[slots], rows_step, n)
    step[slots] = rows_step + 1
    return u, rows_step


if triton is not None:
    @triton.jit
    def _mix(z):
        z = z + 0x9E3779B97F4A7C15
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
        z = (z ^ (z >> 27)) * 0x94D049BB133111EB
        return z ^ (z >> 31)

    @triton.jit
    def _slot_uniforms(seed_mix_ptr, step_ptr, slots_ptr, out_ptr, row_step_ptr, n,
                       N: tl.constexpr):
        r = tl.program_id(0)
        slot = tl.load(slots_ptr + r)
        step = tl.load(step_ptr + slot)
        tl.store(row_step_ptr + r, step)
        tl.store(step_ptr + slot, step + 1)
        h0 = _mix(tl.load(seed_mix_ptr + slot).to(tl.uint64, bitcast=True)
                  ^ step.to(tl.uint64, bitcast=True))
        j = tl.arange(0, N)
        h = _mix(h0 ^ j.to(tl.uint64))
        tl.store(out_ptr + r * n + j, (h >> 40).to(tl.float32) * (2.0 ** -24), mask=j < n)


def fused_available(device) -> bool:
    """Whether the fused kernel runs on ``device`` (Triton present; CUDA, or Triton's
    interpreter, ``TRITON_INTERPRET=1``, on the CPU: the tests)."""
    if triton is None or _state["broken"]:
        return False
    interpret = os.environ.get("TRITON_INTERPRET") == "1"
    return torch.device(device).type == "cuda" or (interpret and
                                                  torch.device(device).type == "cpu")


def slot_uniforms(seed_mix: Tensor, step: Tensor, slots: Tensor, n: int
                  ) -> tuple[Tensor, Tensor]:
    """The step's uniforms of the rows in ``slots [b]`` (``[b, n]`` fp32) and each row's noise
    step (``[b]`` int64), from the slot table's ``seed_mix`` and ``step`` columns, whose rows
    ``slots`` advance by one. One kernel where :func:`fused_available`, else PyTorch's ops; the
    same bits either way."""
    if not fused_available(seed_mix.device):
        return slot_uniforms_torch(seed_mix, step, slots, n)
    b = slots.shape[0]
    out = torch.empty(b, n, dtype=torch.float32, device=seed_mix.device)
    row_step = torch.empty(b, dtype=torch.long, device=seed_mix.device)
    try:
        _slot_uniforms[(b,)](seed_mix, step, slots, out, row_step, n,
                             N=triton.next_power_of_2(n))
    except Exception as e:  # a compiler that refuses it: the ops, said once
        _state["broken"] = f"{type(e).__name__}: {e}"
        logger.warning("soft sampler: the fused noise kernel failed to build (%s); the noise "
                       "is drawn with PyTorch's ops (the same bits, more launches)",
                       _state["broken"])
        return slot_uniforms_torch(seed_mix, step, slots, n)
    return out, row_step
