"""Teacher-forced replay of soft inputs (`soft_spatial.softthink.replay`, docs/design.md §2.7): inside
the block, the recorded rows of the embedding's output are the mixtures the rollout fed back
(against a float64 formula written here), gradients reach the table and τ as autograd of that
formula says, the hook runs before the module's other forward hooks, and it is gone afterwards."""
import pytest
import torch

from soft_spatial.softthink.replay import soft_inputs

V, D, K = 11, 6, 3


def _records(shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, V, shape, generator=g)
    mask = torch.rand(shape, generator=g) < 0.6
    topk = torch.stack([torch.randperm(V, generator=g)[:K] for _ in range(ids.numel())]).reshape(*shape, K)
    scores = torch.randn(*shape, K, generator=g, dtype=torch.float64)
    tau = (0.3 + torch.rand(shape, generator=g, dtype=torch.float64)).requires_grad_(True)
    soft = torch.rand(shape, generator=g) < 0.5
    return ids, mask, topk, scores, tau, soft


def _expected(weight, ids, mask, topk, scores, tau, soft):
    """Row by row: E[ids] off the mask; Σ_k softmax(z/τ)_k E[ids_k] at a soft record, E[ids_0] at a
    discrete one."""
    rows = []
    for i in range(ids.numel()):
        pos = divmod(i, ids.shape[-1]) if ids.dim() == 2 else (i,)
        if not mask[pos]:
            rows.append(weight[ids[pos]])
        elif soft[pos]:
            w = torch.softmax(scores[pos] / tau[pos], -1)
            rows.append((w[:, None] * weight[topk[pos]]).sum(0))
        else:
            rows.append(weight[topk[pos][0]])
    return torch.stack(rows).reshape(*ids.shape, D)


@pytest.mark.parametrize("shape", [(2, 5), (1, 9)])  # padded [B, L], verl's packed [1, nnz]
def test_recorded_rows_take_the_mixture_and_gradients_follow_the_formula(shape):
    emb = torch.nn.Embedding(V, D).double()
    ids, mask, topk, scores, tau, soft = _records(shape)
    probe = torch.randn(*shape, D, dtype=torch.float64)
    with soft_inputs(emb, mask, topk, scores, tau, soft):
        out = emb(ids)
    want = _expected(emb.weight, ids, mask, topk, scores, tau, soft)
    torch.testing.assert_close(out, want, rtol=0, atol=1e-12)
    grads = torch.autograd.grad((out * probe).sum(), [emb.weight, tau])
    ref = torch.autograd.grad((want * probe).sum(), [emb.weight, tau])
    for got, exp in zip(grads, ref):
        torch.testing.assert_close(got, exp, rtol=0, atol=1e-12)
    assert grads[1][mask & soft].abs().min() > 0 and (grads[1][~(mask & soft)] == 0).all()


def test_the_hook_runs_first_and_is_removed_even_after_an_error():
    emb = torch.nn.Embedding(V, D).double()
    ids, mask, topk, scores, tau, soft = _records((2, 5), seed=1)
    seen = []
    emb.register_forward_hook(lambda m, a, out: seen.append(out.detach().clone()))
    with soft_inputs(emb, mask, topk, scores, tau, soft):
        replayed = emb(ids)
    torch.testing.assert_close(seen[-1], replayed.detach())  # later hooks see the replayed rows
    with pytest.raises(KeyError):
        with soft_inputs(emb, mask, topk, scores, tau, soft):
            raise KeyError("mid-forward")
    torch.testing.assert_close(emb(ids), emb.weight[ids])  # no hook left behind
    with pytest.raises(RuntimeError, match=r"embedding output \(2, 4, 6\) does not match the record "
                                           r"mask \(2, 5\)"):
        with soft_inputs(emb, mask, topk, scores, tau, soft):
            emb(ids[:, :4])
