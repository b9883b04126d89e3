"""Gumbel log-density (DESIGN §2.6, eq. 5) against torch.distributions and float64 formulas."""
import math

import pytest
import torch

from soft_spatial.softthink import (candidate_logp, candidates, gumbel_log_density, perturb,
                                    soft_step_log_density)


@pytest.mark.parametrize("c", [1.0, 0.5, 2.0])
def test_density_equals_torch_gumbel_log_prob(c):
    g = torch.Generator().manual_seed(0)
    logp = torch.log_softmax(torch.randn(8, 5, generator=g, dtype=torch.float64), -1)
    z = perturb(logp, c, generator=g)
    ours = gumbel_log_density(z, logp, noise_scale=c)
    ref = torch.distributions.Gumbel(logp, torch.full_like(logp, c)).log_prob(z).sum(-1)
    torch.testing.assert_close(ours, ref, rtol=0, atol=1e-10)
    # fp32 path agrees with the float64 reference to float tolerance
    ours32 = gumbel_log_density(z.float(), logp.float(), noise_scale=c)
    assert ours32.dtype == torch.float32
    torch.testing.assert_close(ours32.double(), ref, rtol=1e-5, atol=1e-5)


def naive_compat(z, logp, c, clamp, min_logp, reduce):
    """Reference-implementation variant written out in float64 loops."""
    out = []
    for zr, lr in zip(z.double().tolist(), logp.double().tolist()):
        vals, keep = [], []
        for zk, lk in zip(zr, lr):
            e = (zk - lk) / c
            if clamp is not None:
                e = min(max(e, clamp[0]), clamp[1])
            vals.append(-e - math.exp(-e) - math.log(c))
            keep.append(min_logp is None or lk > min_logp)
        s = sum(v for v, m in zip(vals, keep) if m)
        n = sum(keep)
        out.append(s / max(1, n) if reduce == "mean" else s)
    return torch.tensor(out, dtype=torch.float64)


@pytest.mark.parametrize("reduce,clamp,min_logp", [
    ("sum", None, None), ("mean", None, None), ("mean", (-1.5, 3.0), -3.0),
    ("sum", (-1.5, 3.0), None), ("sum", None, -3.0)])
def test_compatibility_switches_match_naive_formula(reduce, clamp, min_logp):
    g = torch.Generator().manual_seed(1)
    logp = torch.log_softmax(torch.randn(16, 5, generator=g, dtype=torch.float64) * 2, -1)
    z = logp + 2.5 * torch.randn(16, 5, generator=g, dtype=torch.float64)
    ours = gumbel_log_density(z, logp, reduce=reduce, clamp=clamp, min_logp=min_logp)
    torch.testing.assert_close(ours, naive_compat(z, logp, 1.0, clamp, min_logp, reduce),
                               rtol=0, atol=1e-10)


def test_density_gradient_gradcheck():
    g = torch.Generator().manual_seed(2)
    logp = torch.log_softmax(torch.randn(4, 5, generator=g, dtype=torch.float64), -1)
    z = perturb(logp, 1.0, generator=g)
    lp = logp.clone().requires_grad_(True)
    assert torch.autograd.gradcheck(lambda x: gumbel_log_density(z, x), (lp,))


def test_logit_gradient_is_exactly_k_sparse():
    g = torch.Generator().manual_seed(3)
    logits = torch.randn(3, 40, generator=g, dtype=torch.float64, requires_grad=True)
    ids, logp = candidates(logits.detach(), 5)
    z = perturb(logp, 1.0, generator=g)
    soft_step_log_density(logits, ids, z).sum().backward()
    support = torch.zeros_like(logits, dtype=torch.bool).scatter_(-1, ids, True)
    assert logits.grad[~support].abs().max() == 0
    assert logits.grad[support].abs().min() > 0
    # candidate_logp on the candidates' own ids reproduces candidates()' logp
    torch.testing.assert_close(candidate_logp(logits.detach(), ids), logp)


@pytest.mark.parametrize("gap", [-1e4, -1e30, -3.0e38, 1e30, 3.0e38, 0.0, -60.0])
def test_density_is_finite_for_extreme_inputs(gap):
    logp = torch.log_softmax(torch.randn(2, 5), -1).requires_grad_(True)
    z = (logp.detach() + gap).float()
    z = torch.nan_to_num(z, posinf=3.0e38, neginf=-3.0e38)
    for kwargs in ({}, {"reduce": "mean"}, {"clamp": (-1.5, 3.0), "min_logp": -3.0}):
        out = gumbel_log_density(z, logp, **kwargs)
        assert torch.isfinite(out).all(), (gap, kwargs, out)
        (grad,) = torch.autograd.grad(out.sum(), logp)
        assert torch.isfinite(grad).all(), (gap, kwargs)


def test_density_rejects_bad_arguments():
    z = torch.zeros(5)
    with pytest.raises(ValueError, match="noise_scale"):
        gumbel_log_density(z, z, noise_scale=0.0)
    with pytest.raises(ValueError, match="reduce"):
        gumbel_log_density(z, z, reduce="max")


def test_ratio_is_one_at_the_rollout_policy_and_density_is_normalised():
    """log P_old − log P_old = 0; and the 1-D Gumbel density integrates to 1 (trapezoid)."""
    logp = torch.log_softmax(torch.randn(5, dtype=torch.float64), -1)
    z = perturb(logp, 1.0, generator=torch.Generator().manual_seed(0))
    assert gumbel_log_density(z, logp) - gumbel_log_density(z, logp) == 0
    x = torch.linspace(-10, 30, 200_001, dtype=torch.float64)
    dens = gumbel_log_density(x[:, None], torch.full((x.numel(), 1), -0.7, dtype=torch.float64),
                              noise_scale=1.5).exp()
    assert torch.trapezoid(dens, x).item() == pytest.approx(1.0, abs=1e-6)
