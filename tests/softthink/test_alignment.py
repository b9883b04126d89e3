"""Gradient alignment (docs/design.md §2.9–2.10) against the naive dense Σ d vᵀ
computation."""
import pytest
import torch

from soft_spatial.softthink import (AdaptSoft, AlignmentScaler, SparseGrad, alignment_loss,
                                    alignment_scores, center_per_rollout, controller_surrogate,
                                    mixture_weights, select_reference, soft_embedding)

V, D = 50, 8


def sparse(n, k, g, dtype=torch.float64):
    ids = torch.randint(0, V, (n, k), generator=g)
    return SparseGrad(ids, torch.randn(n, k, generator=g, dtype=dtype))


def naive_alpha(d_opt, v_opt, d_ref, v_ref):
    """α_t = ⟨d_t v_tᵀ, G_ref⟩_F with G_ref = Σ_s d_s v_sᵀ built as a dense V×D matrix."""
    g_ref = sum(torch.outer(d, v) for d, v in zip(d_ref, v_ref))
    return torch.stack([(torch.outer(d, v) * g_ref).sum() for d, v in zip(d_opt, v_opt)])


def dense(x):
    return x.to_dense(V) if isinstance(x, SparseGrad) else x


@pytest.mark.parametrize("vocab_block,entry_chunk", [(8192, 8192), (7, 3), (1, 1)])
def test_alignment_matches_naive_outer_products(vocab_block, entry_chunk):
    g = torch.Generator().manual_seed(0)
    d_opt = sparse(12, 5, g)
    v_opt = torch.randn(12, D, generator=g, dtype=torch.float64)
    d_ref_soft, d_ref_hard = sparse(9, 5, g), torch.randn(3, V, generator=g, dtype=torch.float64)
    v_ref_soft = torch.randn(9, D, generator=g, dtype=torch.float64)
    v_ref_hard = torch.randn(3, D, generator=g, dtype=torch.float64)
    alpha = alignment_scores(d_opt, v_opt, [d_ref_soft, d_ref_hard], [v_ref_soft, v_ref_hard],
                             vocab_block=vocab_block, entry_chunk=entry_chunk)
    ref = naive_alpha(dense(d_opt), v_opt, torch.cat([dense(d_ref_soft), d_ref_hard]),
                      torch.cat([v_ref_soft, v_ref_hard]))
    torch.testing.assert_close(alpha, ref, rtol=1e-6, atol=1e-9)


def test_alignment_dense_optimisation_rows_and_tuple_form():
    g = torch.Generator().manual_seed(1)
    d_opt = [sparse(4, 5, g), torch.randn(2, V, generator=g, dtype=torch.float64)]
    v_opt = [torch.randn(4, D, generator=g, dtype=torch.float64),
             torch.randn(2, D, generator=g, dtype=torch.float64)]
    d_ref = sparse(6, 5, g)
    v_ref = torch.randn(6, D, generator=g, dtype=torch.float64)
    alpha = alignment_scores(d_opt, v_opt, (d_ref.ids, d_ref.values), v_ref, vocab_block=11)
    ref = naive_alpha(torch.cat([dense(d_opt[0]), d_opt[1]]), torch.cat(v_opt), dense(d_ref),
                      v_ref)
    torch.testing.assert_close(alpha, ref, rtol=1e-6, atol=1e-9)


def test_alignment_duplicate_ids_add_up_and_float32_agrees():
    g = torch.Generator().manual_seed(2)
    d_opt = SparseGrad(torch.tensor([[3, 3, 7, 0, 0]]), torch.tensor([[1.0, 2.0, -1.0, 0, 0]]))
    v_opt = torch.randn(1, D, generator=g)
    d_ref = sparse(5, 5, g, torch.float32)
    d_ref.ids[0, :2] = torch.tensor([3, 7])
    v_ref = torch.randn(5, D, generator=g)
    alpha = alignment_scores(d_opt, v_opt, d_ref, v_ref)
    assert alpha.dtype == torch.float32
    ref = naive_alpha(dense(d_opt).double(), v_opt.double(), dense(d_ref).double(), v_ref.double())
    torch.testing.assert_close(alpha.double(), ref, rtol=1e-5, atol=1e-6)


def test_alignment_gradient_flows_to_v_opt_only():
    g = torch.Generator().manual_seed(3)
    d_opt, d_ref = sparse(5, 5, g), sparse(4, 5, g)
    v_ref = torch.randn(4, D, generator=g, dtype=torch.float64, requires_grad=True)
    v_opt = torch.randn(5, D, generator=g, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda v: alignment_scores(d_opt, v, d_ref, v_ref), (v_opt,))
    alignment_scores(d_opt, v_opt, d_ref, v_ref).sum().backward()
    assert v_ref.grad is None  # the reference gradient is a constant


def test_empty_optimisation_set():
    g = torch.Generator().manual_seed(4)
    alpha = alignment_scores(SparseGrad(torch.zeros(0, 5, dtype=torch.long), torch.zeros(0, 5)),
                             torch.zeros(0, D), sparse(3, 5, g, torch.float32), torch.randn(3, D))
    assert alpha.shape == (0,)
    assert alignment_loss(alpha, 10.0).item() == 0.0


def test_tau_gradient_through_alignment_matches_finite_differences():
    """τ → mixture → soft embeddings → a small causal network → v → α → κ/|O|·L_AS."""
    g = torch.Generator().manual_seed(5)
    steps, k = 6, 5
    emb = torch.randn(V, D, generator=g, dtype=torch.float64)
    ids = torch.randint(0, V, (steps, k), generator=g)
    z = torch.randn(steps, k, generator=g, dtype=torch.float64)
    a = torch.randn(D, D, generator=g, dtype=torch.float64) / D ** 0.5
    d_opt = sparse(steps, k, g)
    d_ref, v_ref = sparse(7, k, g), torch.randn(7, D, generator=g, dtype=torch.float64)

    def loss(tau):
        e = soft_embedding(emb, ids, mixture_weights(z, tau))
        # causal mixing: every hidden state depends on all earlier soft inputs
        csum = torch.cumsum(e, 0) / torch.arange(1, steps + 1, dtype=torch.float64)[:, None]
        v = torch.tanh(csum @ a)
        return alignment_loss(alignment_scores(d_opt, v, d_ref, v_ref), 3.0)

    tau = (torch.rand(steps, generator=g, dtype=torch.float64) * 0.8 + 0.1).requires_grad_(True)
    assert torch.autograd.gradcheck(loss, (tau,), eps=1e-6, atol=1e-7, rtol=1e-5)
    (grad,) = torch.autograd.grad(loss(tau), tau)
    assert grad[:-1].abs().min() > 0  # earlier steps influence later hidden states


def test_select_reference():
    for n in (1, 2, 4, 8, 13):
        m = select_reference(n, 0.25, generator=torch.Generator().manual_seed(n))
        assert m.dtype == torch.bool and m.sum().item() == max(1, round(0.25 * n))
    picks = torch.stack([select_reference(8, generator=torch.Generator().manual_seed(s))
                         for s in range(200)]).double().mean(0)
    assert picks.min() > 0.1  # every sequence gets picked sometimes (random, not "the last")
    with pytest.raises(ValueError):
        select_reference(0)


def test_scaler_matches_naive_ema_and_round_trips():
    g = torch.Generator().manual_seed(6)
    alphas = [torch.randn(n, generator=g) * s for n, s in [(10, 1.0), (4, 1e-4), (7, 3.0), (0, 1.)]]
    sc = AlignmentScaler(beta=0.9, target=1e-3, max_scale=1e6)
    assert sc.scale == 1e6
    m = None
    for i, a in enumerate(alphas):
        kappa = sc.update(a)
        if a.numel():
            q = a.double().pow(2).mean().sqrt().item()
            m = q if m is None else 0.9 * m + 0.1 * q
        assert kappa == pytest.approx(min(1e6, 1e-3 / (m + 1e-30)), rel=1e-9)
        if i == 1:
            state = sc.state_dict()
            twin = AlignmentScaler()
            twin.load_state_dict(state)
    # the restored twin continues exactly like the original did after step 1
    assert twin.update(alphas[2]) == pytest.approx(
        min(1e6, 1e-3 / (0.9 * state["m"] + 0.1 * alphas[2].double().pow(2).mean().sqrt().item()
                         + 1e-30)), rel=1e-9)
    tiny = AlignmentScaler()
    assert tiny.update(torch.full((3,), 1e-12)) == 1e6  # capped


def test_center_per_rollout_sums_to_zero_and_matches_loop():
    g = torch.Generator().manual_seed(7)
    gt = torch.randn(4, 9, generator=g, dtype=torch.float64)
    rollout = torch.arange(4)[:, None].expand(4, 9)
    mask = torch.rand(4, 9, generator=g) > 0.3
    mask[2] = False  # a rollout with no soft step
    out = center_per_rollout(gt, rollout, mask)
    for r in range(4):
        sel = mask[r]
        if sel.any():
            ref = gt[r, sel] - gt[r, sel].mean()
            torch.testing.assert_close(out[r, sel], ref)
            assert abs(out[r, sel].sum().item()) < 1e-12
        assert (out[r, ~sel] == 0).all()
    # flat form with interleaved rollout ids gives the same answer
    perm = torch.randperm(36, generator=g)
    flat = center_per_rollout(gt.reshape(-1)[perm], rollout.reshape(-1)[perm],
                              mask.reshape(-1)[perm])
    torch.testing.assert_close(flat, out.reshape(-1)[perm])
    with pytest.raises(ValueError):
        center_per_rollout(gt, rollout[:, :3], mask)


def test_controller_surrogate_gradient_is_centred_tau_gradient():
    ctrl = AdaptSoft(8, width=16).double()
    with torch.no_grad():
        ctrl.fc2.weight.normal_()
    x = torch.randn(10, ctrl.feature_dim, dtype=torch.float64)
    u_roll = ctrl(x).detach()
    tau_upd = ctrl.replay_temperature(x, u_roll)
    g_c = torch.randn(10, dtype=torch.float64)
    params = [ctrl.fc2.weight, ctrl.b]
    got = torch.autograd.grad(controller_surrogate(g_c, tau_upd), params, retain_graph=True)
    want = torch.autograd.grad(tau_upd, params, grad_outputs=g_c)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)
