"""The fused noise kernel (soft_spatial/engines/sglang/noise_kernel.py) draws the bits of
softthink.noise.step_uniforms — the noise contract — and advances the slots' steps as the PyTorch
ops do. Run with Triton's interpreter on the CPU, in a child process (the interpreter is chosen
when the kernel is defined); on a GPU the kit's X/sampler checks it before timing anything."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("triton")

CHILD = textwrap.dedent("""
    import torch
    from soft_spatial.engines.sglang.noise_kernel import (fused_available, slot_uniforms,
                                                          slot_uniforms_torch)
    from soft_spatial.softthink.noise import premix_seed, seed_tensor
    assert fused_available("cpu")
    g = torch.Generator().manual_seed(0)
    rows = 40
    seeds = seed_tensor([0, 1, 2**63, 2**64 - 1, 10**18] + torch.randint(
        0, 2**62, (rows - 5,), generator=g).tolist())
    table = premix_seed(seeds)
    steps = torch.randint(0, 2**40, (rows,), generator=g)
    steps[:3] = torch.tensor([0, 1, 2**62])
    slots = torch.randperm(rows, generator=g)[:17]
    for n in (1, 6, 9):  # K + 1 for K = 0, 5, 8: block widths 1, 8, 16
        s1, s2 = steps.clone(), steps.clone()
        u1, r1 = slot_uniforms(table, s1, slots, n)
        u2, r2 = slot_uniforms_torch(table, s2, slots, n)
        assert torch.equal(u1, u2) and torch.equal(r1, r2) and torch.equal(s1, s2), n
        assert torch.equal(r1, steps[slots]) and torch.equal(s1[slots], steps[slots] + 1)
    print("same bits")
""")


def test_the_fused_kernel_draws_the_noise_contracts_bits():
    env = dict(os.environ, TRITON_INTERPRET="1")
    res = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, env=env,
                         timeout=300)
    assert res.returncode == 0 and "same bits" in res.stdout, res.stdout + res.stderr[-3000:]


def test_without_the_kernel_the_ops_draw_the_same_noise():
    """On the CPU (no interpreter) the sampler uses the PyTorch ops: softthink's function."""
    import torch

    from soft_spatial.engines.sglang.noise_kernel import fused_available, slot_uniforms
    from soft_spatial.softthink.noise import noise_uniforms, premix_seed, seed_tensor
    if os.environ.get("TRITON_INTERPRET") == "1":
        pytest.skip("the interpreter is on in this process")
    assert not fused_available("cpu")
    seeds, steps = seed_tensor([3, 4, 5]), torch.tensor([7, 0, 2])
    u, rows = slot_uniforms(premix_seed(seeds), steps.clone(), torch.tensor([2, 0, 1]), 6)
    assert torch.equal(u, noise_uniforms(seeds[[2, 0, 1]], steps[[2, 0, 1]], 6))
    assert rows.tolist() == [2, 7, 0]
