"""Test helper shared by the engine, actor and SGLang tests (no tests here)."""
import torch

from soft_spatial.softthink import AdaptSoft


def trained_controller(hidden, seed=0, width=32):
    """An AdaptSoft with random (non-initial) weights, so τ varies by step."""
    ctrl = AdaptSoft(hidden_size=hidden, width=width, seed=seed)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in ctrl.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.5)
    return ctrl
