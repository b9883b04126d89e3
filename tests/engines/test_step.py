"""The sampler's two ways to one step's records (soft_spatial.engines.step.sample_step): every row
through both paths with a device-side select (what an accelerator runs: no host read) and, on the
CPU, each row through its own path only. Same inputs, mixed soft and discrete rows, every mode,
both densities: the same records (bit for bit, but AdaptSoft's batched matmul: to fp32 rounding),
and each against an independent per-row computation of its path."""
from __future__ import annotations

import pytest
import torch

from soft_spatial.engines.step import discrete_sample, sample_step
from soft_spatial_bench.workloads import random_controller
from soft_spatial.softthink import (DensityConfig, SamplingConfig, SoftThinkingConfig,
                                    gumbel_log_density, noise_uniforms, seed_tensor)

B, V, D, K = 7, 50, 12, 4


def _inputs(seed=0):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(B, V, generator=g) * 3
    logits[:, -1] = float("-inf")  # a never-emittable id
    h = torch.randn(B, D, generator=g)
    u = noise_uniforms(seed_tensor(list(range(100, 100 + B))), 3, K + 1)
    thinking = torch.tensor([True, False, True, True, False, True, False])
    return logits, h, u, thinking


@pytest.mark.parametrize("density", [DensityConfig(), DensityConfig.reference()],
                         ids=["exact", "reference"])
@pytest.mark.parametrize("mode", ["hard", "fixed", "adaptsoft"])
@pytest.mark.parametrize("sampling", [SamplingConfig(), SamplingConfig(temperature=0.7, top_k=9,
                                                                       top_p=0.8)],
                         ids=["plain", "filtered"])
def test_own_path_equals_both_paths_and_select(mode, density, sampling):
    logits, h, u, thinking = _inputs()
    conf = SoftThinkingConfig(mode=mode, top_k=K)
    ctrl = random_controller(D, seed=1, width=16).float().eval() if mode == "adaptsoft" else None
    fdim = ctrl.feature_dim if ctrl is not None else 9
    with torch.no_grad():
        both = sample_step(logits, h, u, thinking, conf, sampling, ctrl, fdim, debug=True,
                           density=density, own_path=False).present()
        own = sample_step(logits, h, u, thinking, conf, sampling, ctrl, fdim, debug=True,
                          density=density, own_path=True).present()
        default = sample_step(logits, h, u, thinking, conf, sampling, ctrl, fdim, debug=True,
                              density=density).present()
    assert set(both) == set(own) == set(default)
    for key in both:
        assert both[key].dtype == own[key].dtype and both[key].shape == own[key].shape, key
        assert torch.equal(own[key], default[key]), key  # the CPU's default is its own path
        if mode == "adaptsoft" and key in ("u", "tau", "weights", "loglik"):
            torch.testing.assert_close(own[key], both[key], rtol=1e-6, atol=1e-6)
        else:
            assert torch.equal(own[key], both[key]), key
    soft = thinking & conf.is_soft
    assert torch.equal(own["soft"], soft)
    # discrete rows, one at a time, by the draw itself: the token and its log-probability
    for r in (~soft).nonzero().squeeze(-1).tolist():
        tok, lp = discrete_sample(logits[r:r + 1], u[r:r + 1, K], sampling, sampling.temperature)
        assert int(own["topk_ids"][r, 0]) == int(tok) and (own["topk_ids"][r, 1:] == 0).all()
        assert float(own["loglik"][r]) == float(lp)
        assert float(own["tau"][r]) == 0.0 and (own["scores"][r] == 0).all()
    # soft rows: the recorded likelihood is the density of the recorded scores (fp64 reference)
    for r in soft.nonzero().squeeze(-1).tolist():
        ref = gumbel_log_density(own["scores"][r].double(), own["logp"][r].double(), 1.0,
                                 density.reduce, density.clamp, density.min_logp)
        assert abs(float(own["loglik"][r]) - float(ref)) < 1e-4
        assert int(own["topk_ids"][r, 0]) == int(logits[r].argmax()) or mode != "hard"


def test_all_rows_of_one_kind():
    logits, h, u, _ = _inputs(1)
    conf = SoftThinkingConfig(mode="fixed", top_k=K)
    for thinking in (torch.ones(B, dtype=torch.bool), torch.zeros(B, dtype=torch.bool)):
        both = sample_step(logits, h, u, thinking, conf, SamplingConfig(), None, 1,
                           own_path=False).present()
        own = sample_step(logits, h, u, thinking, conf, SamplingConfig(), None, 1,
                          own_path=True).present()
        assert set(both) == set(own) and all(torch.equal(both[k], own[k]) for k in both)
