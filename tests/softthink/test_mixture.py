"""softthink.mixture against independent float64 references (docs/design.md §2.1–2.4)."""
import math
import subprocess
import sys

import pytest
import torch
from scipy import stats

from soft_spatial.softthink import (candidates, gumbel_from_uniform, mixture_weights,
                                    normalized_entropy, perturb, soft_embedding, soft_step, spine)


def gumbel(shape, seed, clamp=None):
    """Standard Gumbel samples the way the engines draw them: uniforms from a seeded generator."""
    return gumbel_from_uniform(torch.rand(shape, generator=torch.Generator().manual_seed(seed)),
                               clamp)


def naive_candidates(logits, k, temperature):
    """float64 reference: full-vocab softmax, sort, renormalise probabilities (not logits)."""
    p = torch.softmax(logits.double() / temperature, -1)
    order = torch.argsort(p, -1, descending=True)[..., :k]
    pk = p.gather(-1, order)
    return order, torch.log(pk / pk.sum(-1, keepdim=True))


@pytest.mark.parametrize("temperature", [1.0, 0.6, 2.5])
def test_candidates_match_float64_reference(temperature):
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 4, 97, generator=g) * 3
    ids, logp = candidates(logits, 5, temperature)
    ref_ids, ref_logp = naive_candidates(logits, 5, temperature)
    assert ids.shape == logp.shape == (3, 4, 5) and ids.dtype == torch.long
    assert torch.equal(ids, ref_ids)
    torch.testing.assert_close(logp.double(), ref_logp, rtol=0, atol=2e-6)
    assert torch.all(logp[..., :-1] >= logp[..., 1:])  # descending


def test_candidates_depend_only_on_candidate_logits():
    logits = torch.randn(2, 60)
    ids, logp = candidates(logits, 4)
    other = logits.clone()
    mask = torch.ones_like(other, dtype=torch.bool).scatter_(-1, ids, False)
    other[mask] -= 5.0  # lower every non-candidate: full-vocab normaliser changes, logp must not
    ids2, logp2 = candidates(other, 4)
    assert torch.equal(ids, ids2)
    torch.testing.assert_close(logp, logp2, rtol=0, atol=1e-6)


def test_candidates_rejects_bad_arguments():
    with pytest.raises(ValueError, match="temperature"):
        candidates(torch.randn(10), 3, 0.0)
    with pytest.raises(ValueError, match="top_k"):
        candidates(torch.randn(10), 11)


def test_perturb_zero_noise_and_seeded_noise():
    logp = torch.log_softmax(torch.randn(4, 5), -1)
    assert torch.equal(perturb(logp, 0.0, gumbel(logp.shape, 3)), logp)
    a = perturb(logp, 1.0, gumbel(logp.shape, 3))
    b = perturb(logp, 1.0, gumbel(logp.shape, 3))
    assert torch.equal(a, b) and not torch.equal(a, logp)
    big = perturb(torch.zeros(200_000), 2.0, gumbel(200_000, 1))
    # Gumbel(0, c): mean c·γ_Euler, variance c²π²/6
    assert abs(big.mean().item() - 2.0 * 0.5772156649) < 0.02
    assert abs(big.var().item() - 4.0 * math.pi ** 2 / 6) < 0.1
    clamped = perturb(torch.zeros(10_000), 1.0, gumbel(10_000, 1, clamp=(-1.5, 3.0)))
    assert clamped.min() >= -1.5 and clamped.max() <= 3.0


def test_mixture_weights_reference_and_tau_broadcast():
    z = torch.randn(3, 7, 5)
    tau = torch.rand(3, 7) + 0.1
    w = mixture_weights(z, tau)
    ref = torch.softmax(z.double() / tau.double()[..., None], -1)
    torch.testing.assert_close(w.double(), ref, rtol=0, atol=5e-7)
    assert w.dtype == torch.float32
    assert torch.equal(w, mixture_weights(z, tau[..., None]))
    assert torch.equal(mixture_weights(z, 0.5), mixture_weights(z, torch.full((3, 7), 0.5)))
    torch.testing.assert_close(w.sum(-1), torch.ones(3, 7))
    with pytest.raises(ValueError):
        mixture_weights(z, 0.0)


def test_soft_embedding_reference_and_dtypes():
    emb = torch.nn.Embedding(40, 6)
    ids = torch.randint(0, 40, (2, 3, 5))
    w = torch.softmax(torch.randn(2, 3, 5), -1)
    out = soft_embedding(emb, ids, w)
    ref = torch.einsum("bsk,bskd->bsd", w.double(), emb.weight.double()[ids])
    torch.testing.assert_close(out.double(), ref, rtol=0, atol=1e-6)
    assert torch.equal(out, soft_embedding(emb.weight, ids, w))
    one_hot = torch.zeros(2, 3, 5)
    one_hot[..., 0] = 1
    assert torch.equal(soft_embedding(emb, ids, one_hot), emb.weight[ids[..., 0]])
    bf = soft_embedding(emb.weight.bfloat16(), ids, w)
    assert bf.dtype == torch.bfloat16


def test_spine_is_argmax_candidate():
    ids = torch.tensor([[7, 3, 9], [1, 2, 5]])
    z = torch.tensor([[0.1, 2.0, -1.0], [-3.0, -4.0, -2.0]])
    assert spine(ids, z).tolist() == [3, 5]


def test_gumbel_max_spine_frequencies_match_renormalised_probabilities():
    """Gumbel-max: slot argmax_k (log p̃_k + γ_k) is distributed as p̃ (χ² test, fixed seed)."""
    logits = torch.tensor([2.0, 1.5, 1.0, 0.2, -0.5, -3.0, -4.0])
    ids, logp = candidates(logits, 5)
    n = 40_000
    z = perturb(logp.expand(n, 5), 1.0, gumbel((n, 5), 1234))
    picks = spine(ids.expand(n, 5), z)
    observed = torch.stack([(picks == i).sum() for i in ids]).double().numpy()
    p = logp.double().exp()
    expected = (p / p.sum() * n).numpy()
    assert stats.chisquare(observed, expected).pvalue > 1e-3
    # and a wrong distribution is rejected by the same test (the test can fail)
    assert stats.chisquare(observed, torch.full((5,), n / 5.0).numpy()).pvalue < 1e-6


def test_normalized_entropy_limits_and_reference():
    assert normalized_entropy(torch.log(torch.full((5,), 0.2))).item() == pytest.approx(1.0)
    one_hot = torch.tensor([0.0, -float("inf"), -float("inf")])
    h = normalized_entropy(one_hot)
    assert torch.isfinite(h) and h.item() == 0.0
    logp = torch.log_softmax(torch.randn(64, 5, generator=torch.Generator().manual_seed(0)), -1)
    ref = -(logp.double().exp() * logp.double()).sum(-1) / math.log(5)
    # float32 evaluation of a sum of 5 terms near 1: a few float32 ulps (1.2e-7 each)
    torch.testing.assert_close(normalized_entropy(logp).double(), ref, rtol=0, atol=1e-6)
    assert not torch.allclose(normalized_entropy(logp[:, :4]).double(), ref[:], atol=1e-3)
    assert normalized_entropy(torch.zeros(3, 1)).eq(0).all()


def test_soft_step_sorts_slots_by_score():
    logits = torch.randn(6, 50)
    ids, z, logp = soft_step(logits, 5, 1.0, 1.0, gumbel((6, 5), 0))
    assert torch.all(z[:, :-1] >= z[:, 1:])
    assert torch.equal(ids[:, 0], spine(ids, z))
    # logp is the candidates' renormalised log-prob, permuted with the slots
    c_ids, c_logp = candidates(logits, 5)
    for r in range(6):
        for j in range(5):
            col = (c_ids[r] == ids[r, j]).nonzero().item()
            assert logp[r, j] == c_logp[r, col]


def test_softthink_imports_neither_verl_nor_sglang():
    code = ("import sys, soft_spatial.softthink; "
            "bad = [m for m in sys.modules if m.split('.')[0] in ('verl', 'sglang')]; "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)
