"""Gumbel log-density (docs/design.md §2.6, eq. 5) against torch.distributions and float64
formulas."""
import math

import pytest
import torch

from soft_spatial.softthink import (candidate_logp, candidates, gumbel_from_uniform, log_density_gap,
                                    gumbel_log_density, perturb, soft_step_log_density)


def gumbel_like(x, generator):
    """Standard Gumbel samples of x's shape, drawn as the engines draw them (uniforms)."""
    return gumbel_from_uniform(torch.rand(x.shape, generator=generator))


@pytest.mark.parametrize("c", [1.0, 0.5, 2.0])
def test_density_equals_torch_gumbel_log_prob(c):
    g = torch.Generator().manual_seed(0)
    logp = torch.log_softmax(torch.randn(8, 5, generator=g, dtype=torch.float64), -1)
    z = perturb(logp, c, gumbel_like(logp, g))
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
    z = perturb(logp, 1.0, gumbel_like(logp, g))
    lp = logp.clone().requires_grad_(True)
    assert torch.autograd.gradcheck(lambda x: gumbel_log_density(z, x), (lp,))


def test_logit_gradient_is_exactly_k_sparse():
    g = torch.Generator().manual_seed(3)
    logits = torch.randn(3, 40, generator=g, dtype=torch.float64, requires_grad=True)
    ids, logp = candidates(logits.detach(), 5)
    z = perturb(logp, 1.0, gumbel_like(logp, g))
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
    z = perturb(logp, 1.0, gumbel_like(logp, torch.Generator().manual_seed(0)))
    assert gumbel_log_density(z, logp) - gumbel_log_density(z, logp) == 0
    x = torch.linspace(-10, 30, 200_001, dtype=torch.float64)
    dens = gumbel_log_density(x[:, None], torch.full((x.numel(), 1), -0.7, dtype=torch.float64),
                              noise_scale=1.5).exp()
    assert torch.trapezoid(dens, x).item() == pytest.approx(1.0, abs=1e-6)


# -- memory-lean step likelihood (GPU path of the actor) ---------------------------------------
def _naive_token_logp(logits, tokens, t, banned):
    """float64 log softmax(ℓ/T)[token] with banned ids removed from the normaliser."""
    x = logits.double() / t.double()[:, None]
    if banned is not None:
        x = x.index_fill(-1, banned, float("-inf"))
    return torch.log_softmax(x, -1).gather(-1, tokens[:, None]).squeeze(-1)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
@pytest.mark.parametrize("chunk_elements", [1 << 25, 37])  # one chunk; a chunk of one row
def test_token_log_prob_values_and_gradient_match_float64(dtype, chunk_elements):
    from soft_spatial.softthink import token_log_prob
    g = torch.Generator().manual_seed(1)
    n, v = 7, 50
    logits = (torch.randn(n, v, generator=g, dtype=torch.float64) * 3).to(dtype)
    tokens = torch.randint(0, v - 3, (n,), generator=g)
    t = torch.rand(n, generator=g, dtype=torch.float64) + 0.5
    banned = torch.tensor([v - 1, v - 2])
    leaf = logits.clone().requires_grad_(True)
    ours = token_log_prob(leaf, tokens, t, banned, chunk_elements=chunk_elements)
    w = torch.randn(n, generator=g, dtype=torch.float64)
    (ours.double() * w).sum().backward()
    ref_leaf = logits.double().requires_grad_(True)
    ref = _naive_token_logp(ref_leaf, tokens, t, banned)
    (ref * w).sum().backward()
    tol = {torch.float64: 1e-12, torch.float32: 1e-5, torch.bfloat16: 1e-2}[dtype]
    assert ours.dtype == (torch.float64 if dtype == torch.float64 else torch.float32)
    torch.testing.assert_close(ours.double(), ref, rtol=tol, atol=tol)
    assert leaf.grad.dtype == dtype
    torch.testing.assert_close(leaf.grad.double(), ref_leaf.grad, rtol=tol, atol=tol)
    assert (leaf.grad[:, banned] == 0).all()


def test_step_likelihood_parts_carry_the_logit_gradient():
    """loglik equals the per-step formula; ∂/∂(cand, disc) are exactly ∂/∂logits at the
    candidates of soft steps (zero elsewhere) and at the rows of discrete steps."""
    from soft_spatial.softthink import step_likelihood
    g = torch.Generator().manual_seed(2)
    m, v, k = 9, 40, 5
    logits = torch.randn(m, v, generator=g, dtype=torch.float64).requires_grad_(True)
    rows = torch.tensor([8, 0, 3, 3, 5, 1])  # steps read rows of a larger logits tensor
    soft = torch.tensor([True, False, True, True, False, True])
    ids = torch.stack([torch.randperm(v, generator=g)[:k] for _ in rows])
    z = torch.randn(len(rows), k, generator=g, dtype=torch.float64)
    t = torch.tensor([1.0, 0.6, 1.0, 0.7, 1.0, 1.3], dtype=torch.float64)
    lik = step_likelihood(logits, ids, z, soft, t, rows=rows)
    ref = torch.stack([
        soft_step_log_density(logits[r], ids[i], z[i], float(t[i])) if soft[i] else
        torch.log_softmax(logits[r] / t[i], -1)[ids[i, 0]] for i, r in enumerate(rows.tolist())])
    torch.testing.assert_close(lik.loglik, ref, rtol=0, atol=1e-12)
    w = torch.randn(len(rows), generator=g, dtype=torch.float64)
    loss = (lik.loglik * w).sum()
    d_cand, d_disc, d_full = torch.autograd.grad(loss, [lik.cand_logits, lik.disc_logits, logits])
    per_step = torch.zeros(len(rows), v, dtype=torch.float64)  # the gradient of each step alone
    for i, r in enumerate(rows.tolist()):
        (gi,) = torch.autograd.grad(ref[i] * w[i], logits, retain_graph=True)
        per_step[i] = gi[r]
    s_rows, d_rows = lik.soft_rows, lik.disc_rows
    torch.testing.assert_close(d_cand, per_step[s_rows].gather(1, ids[s_rows]), rtol=0, atol=1e-12)
    off = per_step[s_rows].scatter(1, ids[s_rows], 0.0)
    assert (off == 0).all()  # soft steps: K-sparse
    torch.testing.assert_close(d_disc, per_step[d_rows], rtol=0, atol=1e-12)
    torch.testing.assert_close(d_full, torch.zeros(m, v, dtype=torch.float64).index_add_(
        0, rows, per_step), rtol=0, atol=1e-12)


def test_candidate_logp_is_accurate_at_large_logits():
    """Renormalising after subtracting the maximum keeps fp32 within ~1e-7 of float64 on the same
    inputs at |ℓ/T| ≈ 1e4 (x − logsumexp(x) on the raw values loses ~5e-4 there)."""
    g = torch.Generator().manual_seed(3)
    logits = (1e4 + torch.randn(4, 30, generator=g, dtype=torch.float64) * 3).float()
    ids = torch.topk(logits, 5, -1).indices
    ref = candidate_logp(logits.double(), ids)
    ours = candidate_logp(logits, ids)
    assert (ours.double() - ref).abs().max() < 1e-6
    _, cand = candidates(logits, 5)
    assert (cand.double() - ref).abs().max() < 1e-6


@pytest.mark.parametrize("top", [0.95, 0.6, 0.2])
def test_the_soft_step_score_is_noisier_than_a_token_score(top):
    """Second moment of the score (∇ over the K candidate logits of one step's log-likelihood),
    Monte Carlo at the rollout policy against the closed forms: eq. 5 gives ∂/∂log p̃_k =
    1 − e^{−γ̃_k}, iid with mean 0 and variance 1, so E‖∇‖² = K − 2 + K‖p̃‖² whatever the
    confidence (7.5 at p̃_1 = 0.95, K = 5); a discrete token's is 1 − ‖p̃‖² (0.097). This is why
    GRPO over exact soft-step densities is 5-80x noisier per step than over tokens
    (docs/results/learning.md); the reference variant (mean, clamp, slot mask) keeps only the slots
    with log p̃ > −3."""
    k, n = 5, 200_000
    g = torch.Generator().manual_seed(0)
    p = torch.tensor([top] + [(1 - top) / (k - 1)] * (k - 1), dtype=torch.float64)
    ell = p.log().repeat(n, 1).requires_grad_(True)
    logp = torch.log_softmax(ell, -1)
    z = (logp + gumbel_like(logp, g)).detach()
    (soft,) = torch.autograd.grad(gumbel_log_density(z, logp).sum(), ell, retain_graph=True)
    token = torch.multinomial(p, n, replacement=True, generator=g)
    (hard,) = torch.autograd.grad(logp.gather(-1, token[:, None]).sum(), ell)
    sq = float((p * p).sum())
    assert soft.pow(2).sum(-1).mean().item() == pytest.approx(k - 2 + k * sq, rel=0.02)
    assert hard.pow(2).sum(-1).mean().item() == pytest.approx(1 - sq, rel=0.02)


@pytest.mark.parametrize("c", [1.0, 0.5])
def test_the_gap_a_logprob_change_causes_is_the_closed_form(c):
    """log_density_gap against the two densities evaluated directly (float64): recorded scores
    z = log p̃ + c·γ scored under log p̃ and under log p̃ + Δ (Δ from tiny to several nats, and a
    tail noise γ), and its small-Δ limit Σ(e^{−γ} − 1)Δ/c."""
    g = torch.Generator().manual_seed(3)
    logp = torch.log_softmax(torch.randn(400, 5, generator=g, dtype=torch.float64) * 2, -1)
    gamma = gumbel_from_uniform(torch.rand(400, 5, generator=g, dtype=torch.float64))
    gamma[0, 0] = -4.47  # e^{-γ} = 87: the noise of a uniform at its floor
    for scale in (1e-4, 0.1, 3.0):
        delta = torch.randn(400, 5, generator=g, dtype=torch.float64) * scale
        z = logp + c * gamma
        direct = gumbel_log_density(z, logp, c) - gumbel_log_density(z, logp + delta, c)
        torch.testing.assert_close(log_density_gap(gamma, delta, c), direct, rtol=1e-9, atol=1e-9)
    small = 1e-4 * delta / delta.abs().max()
    first = ((torch.exp(-gamma) - 1) * small / c).sum(-1)  # the second-order term bounds the rest
    rest = (torch.exp(-gamma) * (small / c) ** 2).sum(-1)
    assert ((log_density_gap(gamma, small, c) - first).abs() <= rest).all()
    assert (rest < 1e-3 * first.abs()).float().mean() > 0.9
    assert log_density_gap(gamma, torch.zeros_like(gamma), c).abs().max() == 0
