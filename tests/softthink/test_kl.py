"""The KL to the reference at a soft step (`soft_spatial.softthink.kl`, docs/design.md §2.8): the
exact candidate KL against float64 arithmetic and autograd, and the likelihood reading's target
against Monte Carlo over the rollout's noise."""
import pytest
import torch

from soft_spatial.softthink import perturb


def _candidate_kl_fp64(logits, ref_logits, ids, temperature):
    """KL(p̃ ‖ p̃_ref) over the candidates from the logits, in float64 python arithmetic."""
    import math

    out = []
    for row, ref_row, idx in zip(logits.tolist(), ref_logits.tolist(), ids.tolist()):
        a = [row[j] / temperature for j in idx]
        b = [ref_row[j] / temperature for j in idx]
        la = math.log(sum(math.exp(x - max(a)) for x in a)) + max(a)
        lb = math.log(sum(math.exp(x - max(b)) for x in b)) + max(b)
        out.append(sum(math.exp(x - la) * ((x - la) - (y - lb)) for x, y in zip(a, b)))
    return torch.tensor(out, dtype=torch.float64)


def test_candidate_kl_matches_float64_reference_and_is_k_sparse():
    from soft_spatial.softthink import candidate_logp, candidate_kl

    g = torch.Generator().manual_seed(2)
    v, k, n, temp = 50, 5, 6, 0.7
    logits = (torch.randn(n, v, generator=g) * 3).requires_grad_(True)
    ref_logits = logits.detach() + torch.randn(n, v, generator=g)
    ids = torch.topk(logits.detach(), k).indices
    kl = candidate_kl(candidate_logp(logits, ids, temp), candidate_logp(ref_logits, ids, temp))
    torch.testing.assert_close(kl.double(), _candidate_kl_fp64(logits, ref_logits, ids, temp),
                               rtol=1e-5, atol=1e-6)
    assert (kl >= -1e-7).all()
    assert candidate_kl(candidate_logp(ref_logits, ids, temp),
                        candidate_logp(ref_logits, ids, temp)).abs().max() < 1e-6
    kl.sum().backward()
    nz = logits.grad != 0
    assert (nz.sum(-1) <= k).all()  # K-sparse: only the candidate logits get gradient
    assert nz.gather(-1, ids).any(-1).all()
    # float64 autograd of the reference formula gives the same gradient
    x = logits.detach().double().requires_grad_(True)
    la = torch.log_softmax(x.gather(-1, ids) / temp, -1)
    lb = torch.log_softmax(ref_logits.double().gather(-1, ids) / temp, -1)
    (la.exp() * (la - lb)).sum().backward()
    torch.testing.assert_close(logits.grad.double(), x.grad, rtol=1e-4, atol=1e-6)


def test_likelihood_reading_targets_the_gumbel_density_kl():
    """The release's KL at a soft step (an estimator on log P_θ(z) − log P_ref(z), z from the θ
    rollout) targets Σ_k (e^{−δ_k} + δ_k − 1), not the next-token KL: Monte Carlo check."""
    from soft_spatial.softthink import candidate_kl, gumbel_density_kl, gumbel_log_density

    g = torch.Generator().manual_seed(0)
    logp = torch.log_softmax(torch.tensor([2.0, 1.0, 0.5, -0.5, -1.0], dtype=torch.float64), -1)
    ref = torch.log_softmax(torch.tensor([1.5, 1.2, 0.2, -0.2, -2.0], dtype=torch.float64), -1)
    n = 400_000
    gumbel = -torch.log(torch.empty(n, 5, dtype=torch.float64).exponential_(generator=g))
    z = logp + gumbel
    k1 = gumbel_log_density(z, logp.expand(n, 5)) - gumbel_log_density(z, ref.expand(n, 5))
    expected = gumbel_density_kl(logp, ref)
    assert k1.mean().item() == pytest.approx(expected.item(), abs=4 * k1.std().item() / n ** 0.5)
    assert abs(expected.item() - candidate_kl(logp, ref).item()) > 0.05  # different quantities


@pytest.mark.parametrize("c", [0.5, 2.0])
def test_both_readings_vanish_when_the_policies_agree_and_are_never_negative(c):
    """With noise scale c the likelihood reading's target is E_z[log P_θ(z) − log P_ref(z)] for
    z = log p̃^θ + c·Gumbel (Monte Carlo); both terms are 0 for equal candidates and ≥ 0 else."""
    from soft_spatial.softthink import candidate_kl, gumbel_density_kl, gumbel_log_density

    g = torch.Generator().manual_seed(1)
    logp = torch.log_softmax(torch.randn(64, 4, generator=g, dtype=torch.float64), -1)
    ref = torch.log_softmax(logp + torch.randn(64, 4, generator=g, dtype=torch.float64), -1)
    for kl in (candidate_kl, lambda a, b: gumbel_density_kl(a, b, noise_scale=c)):
        assert (kl(logp, ref) >= 0).all() and kl(logp, ref).max() > 1e-3
        assert kl(logp, logp).abs().max() < 1e-12
    n = 200_000
    gumbel = -torch.log(torch.empty(n, 4, dtype=torch.float64).exponential_(generator=g))
    z = perturb(logp[0].expand(n, 4), c, gumbel)
    k1 = (gumbel_log_density(z, logp[0].expand(n, 4), noise_scale=c)
          - gumbel_log_density(z, ref[0].expand(n, 4), noise_scale=c))
    expected = gumbel_density_kl(logp[0], ref[0], noise_scale=c).item()
    assert k1.mean().item() == pytest.approx(expected, abs=4 * k1.std().item() / n ** 0.5)
    with pytest.raises(ValueError, match="noise_scale must be > 0"):
        gumbel_density_kl(logp, ref, noise_scale=0.0)
    with pytest.raises(ValueError, match=r"candidate_kl: logp \(64, 4\) and ref_logp \(64, 3\)"):
        candidate_kl(logp, ref[:, :3])
