"""The GPU kit's no-wait check of the soft sampler (soft_spatial_bench/gpu/sampler_sync.py) on the
meta device: the SGLang runtime's sampler never reads the device from the host nor copies
blockingly (overlap scheduling), and the check catches each way a wait creeps in. The GPU kit
runs the same on CUDA under its sync debug mode (``X/sync``)."""
from __future__ import annotations

import pytest
import torch


@pytest.mark.parametrize("mode", ["hard", "fixed", "adaptsoft"])
def test_sampler_never_waits_for_the_device(mode):
    """Prefill with a chunked row, two sampling settings, decodes of both (the host path) and of
    one (the decode path, slots on the device), requests joining and leaving:
    on the meta device every host read of the device and every blocking copy raises
    (soft_spatial_bench/gpu/sampler_sync.py; the GPU kit runs the same under CUDA's sync debug mode)."""
    from soft_spatial_bench.gpu.sampler_sync import drive_sampler
    assert drive_sampler("meta", mode) == 15


@pytest.mark.parametrize("wait", ["tolist", "bool", "nonzero", "blocking copy", "list index",
                                  "tensor on the device"])
def test_the_no_wait_check_catches_a_wait(monkeypatch, wait):
    """The check fails when the sampler waits (each way a wait creeps in, but list indexing,
    which only the CUDA check sees)."""
    from soft_spatial_bench.gpu.sampler_sync import drive_sampler
    from soft_spatial.engines.sglang import runtime as rt_mod
    original = rt_mod.sample_step

    def waiting(logits, *a, **kw):
        rec = original(logits, *a, **kw)
        dev, soft = logits.device, rec.soft
        if wait == "tolist":
            soft.tolist()
        elif wait == "bool":
            bool(soft.any())
        elif wait == "nonzero":
            soft.nonzero()
        elif wait == "blocking copy":
            torch.zeros(1).to(dev)
        elif wait == "list index":
            rec.tau[[0]]  # on CUDA a blocking copy of the index; unseen on meta
        else:
            torch.tensor([1], device=dev)
        return rec

    monkeypatch.setattr(rt_mod, "sample_step", waiting)
    if wait == "list index":
        assert drive_sampler("meta", "fixed") == 15
        return
    with pytest.raises((RuntimeError, NotImplementedError)):
        drive_sampler("meta", "fixed")
