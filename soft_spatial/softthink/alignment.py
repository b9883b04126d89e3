"""Gradient alignment for AdaptSoft (docs/design.md §2.9, §2.10).

For every step t, d_t = sg(∂L_GRPO/∂ℓ_t) ∈ R^V and v_t = h_t ∈ R^D (the input of the output layer
W). Step t's contribution to ∂L/∂W is d_t v_tᵀ. With a reference set R,

    G_ref = Σ_{s∈R} d_s v_sᵀ,     α_t = ⟨d_t v_tᵀ, G_ref⟩_F = d_tᵀ G_ref v_t = Σ_s (d_t·d_s)(v_s·v_t).

:func:`alignment_scores` computes α exactly without any V×D matrix per step: it forms
W_t = d_tᵀ G_ref (a D-vector per optimisation step) block by block over the vocabulary ids that
the optimisation steps touch, then α_t = ⟨W_t, v_t⟩. Soft-step d is K-sparse (ids, values),
discrete-step d is dense; both sides accept either, or a list mixing them. Gradient flows to
``v_opt`` only (d and G_ref are constants), which is the only path from α to τ.

The rest of the module is the controller's update rule: reference selection, cross-rank
gathering, RMS scaling with an EMA (§2.10), per-rollout centring and the surrogate loss.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import Tensor

from soft_spatial.softthink.config import AlignmentConfig

__all__ = [
    "SparseGrad",
    "alignment_scores",
    "alignment_loss",
    "select_reference",
    "all_gather_rows",
    "world_size",
    "AlignmentScaler",
    "center_per_rollout",
    "controller_surrogate",
]


@dataclass
class SparseGrad:
    """K-sparse logit gradients of N steps: ``values[n, j]`` at vocabulary id ``ids[n, j]``.

    Duplicate ids in a row add up. Padding slots use value 0 (any id).
    """

    ids: Tensor  # [N, k] int64
    values: Tensor  # [N, k] float

    def __post_init__(self):
        if self.ids.shape != self.values.shape or self.ids.dim() != 2:
            raise ValueError(f"SparseGrad needs ids and values of the same [N, k] shape, got "
                             f"{tuple(self.ids.shape)} and {tuple(self.values.shape)}")

    def __len__(self) -> int:
        return self.ids.shape[0]

    def to_dense(self, vocab_size: int) -> Tensor:
        out = torch.zeros(len(self), vocab_size, dtype=self.values.dtype, device=self.values.device)
        return out.scatter_add_(1, self.ids.long(), self.values)


GradLike = Tensor | SparseGrad | tuple[Tensor, Tensor]


def _as_parts(d, v, what: str) -> list[tuple[Tensor | SparseGrad, Tensor]]:
    """Normalise (d, v) into a list of (SparseGrad | dense [N, V], v [N, D]) parts."""
    if isinstance(d, list):
        if not isinstance(v, list) or len(v) != len(d):
            raise ValueError(f"{what}: a list of gradient parts needs a list of hidden parts of "
                             f"the same length")
        return [p for dd, vv in zip(d, v) for p in _as_parts(dd, vv, what)]
    if isinstance(d, tuple):
        if len(d) != 2 or d[0].is_floating_point():
            raise ValueError(f"{what}: a sparse gradient is a tuple (ids int [N,k], values [N,k])")
        d = SparseGrad(*d)
    n = len(d) if isinstance(d, SparseGrad) else d.shape[0]
    if isinstance(d, Tensor) and d.dim() != 2:
        raise ValueError(f"{what}: dense gradients must be [N, V], got {tuple(d.shape)}")
    if v.dim() != 2 or v.shape[0] != n:
        raise ValueError(f"{what}: hidden states must be [N, D] with N={n}, got {tuple(v.shape)}")
    return [(d, v)]


def _hits(block_ids: Tensor, ids: Tensor) -> tuple[Tensor, Tensor]:
    """For flat ``ids``, which entries fall in the sorted ``block_ids``, and at which position."""
    pos = torch.searchsorted(block_ids, ids).clamp(max=block_ids.numel() - 1)
    hit = block_ids[pos] == ids
    return hit.nonzero(as_tuple=True)[0], pos


def alignment_scores(d_opt, v_opt, d_ref, v_ref, *, vocab_block: int = AlignmentConfig.vocab_block,
                     entry_chunk: int = 8192) -> Tensor:
    """Exact α_t = Σ_{s∈R} (d_t·d_s)(v_s·v_t) for every optimisation step t (§2.9).

    Args:
        d_opt, d_ref: logit gradients, each a dense ``[N, V]`` tensor, a :class:`SparseGrad` /
            ``(ids, values)`` tuple (K-sparse rows), or a list of those.
        v_opt, v_ref: hidden states ``[N, D]`` (lists matching the gradient lists).
        vocab_block: vocabulary ids processed at once (bounds the ``[block, D]`` slice of G_ref).
        entry_chunk: sparse entries processed at once (bounds temporaries).
    Returns:
        α ``[N_opt]`` (parts concatenated in order), differentiable w.r.t. ``v_opt`` only.
    Memory: O(vocab_block·D + entry_chunk·D + N_opt·D); no V×D matrix per step is ever built.
    """
    opt = _as_parts(d_opt, v_opt, "d_opt")
    ref = _as_parts(d_ref, v_ref, "d_ref")
    dtype = torch.float64 if any(v.dtype == torch.float64 for _, v in opt) else torch.float32
    device = opt[0][1].device
    dim = opt[0][1].shape[1]
    if any(v.shape[1] != dim for _, v in opt + ref):
        raise ValueError("alignment_scores: all hidden states must share the same width D")

    # Vocabulary ids whose G_ref rows are needed: every id if any optimisation row is dense.
    dense_widths = {d.shape[1] for d, _ in opt + ref if isinstance(d, Tensor)}
    if len(dense_widths) > 1:
        raise ValueError(f"alignment_scores: dense gradients disagree on V: {sorted(dense_widths)}")
    if any(isinstance(d, Tensor) for d, _ in opt):
        needed = torch.arange(dense_widths.pop(), device=device)
    else:
        needed = torch.unique(torch.cat([d.ids.reshape(-1).to(device) for d, _ in opt]))

    # Flattened sparse entries (row index, id, value), detached.
    def flat(d: SparseGrad):
        k = d.ids.shape[1]
        rows = torch.arange(len(d), device=device).repeat_interleave(k)
        return rows, d.ids.reshape(-1).to(device).long(), d.values.reshape(-1).to(device, dtype)

    ref_flat = [(flat(d), v.detach().to(device, dtype)) if isinstance(d, SparseGrad)
                else (d.detach().to(device, dtype), v.detach().to(device, dtype)) for d, v in ref]
    opt_flat = [flat(d) if isinstance(d, SparseGrad) else d.detach().to(device, dtype)
                for d, _ in opt]
    # W_t = d_tᵀ G_ref, accumulated over vocabulary blocks; detached (constant w.r.t. v_opt).
    w_parts = [torch.zeros(len(d) if isinstance(d, SparseGrad) else d.shape[0], dim,
                           dtype=dtype, device=device) for d, _ in opt]
    with torch.no_grad():
        for start in range(0, needed.numel(), vocab_block):
            blk = needed[start:start + vocab_block]
            g = torch.zeros(blk.numel(), dim, dtype=dtype, device=device)  # G_ref[blk]
            for d, v in ref_flat:
                if isinstance(d, tuple):
                    rows, ids, vals = d
                    idx, pos = _hits(blk, ids)
                    for c in range(0, idx.numel(), entry_chunk):
                        e = idx[c:c + entry_chunk]
                        g.index_add_(0, pos[e], vals[e, None] * v[rows[e]])
                else:
                    g += d[:, blk].T @ v
            for d, w in zip(opt_flat, w_parts):
                if isinstance(d, tuple):
                    rows, ids, vals = d
                    idx, pos = _hits(blk, ids)
                    for c in range(0, idx.numel(), entry_chunk):
                        e = idx[c:c + entry_chunk]
                        w.index_add_(0, rows[e], vals[e, None] * g[pos[e]])
                else:
                    w += d[:, blk] @ g
    return torch.cat([(w * v.to(dtype)).sum(-1) for w, (_, v) in zip(w_parts, opt)])


def alignment_loss(alpha: Tensor, scale: float | Tensor) -> Tensor:
    """κ/|O| · L_AS with L_AS = −Σ_{t∈O} α_t (§2.10); 0 when O is empty."""
    if alpha.numel() == 0:
        return alpha.sum()
    return -(scale / alpha.numel()) * alpha.sum()


def select_reference(num_sequences: int, fraction: float = AlignmentConfig.ref_fraction,
                     generator: torch.Generator | None = None) -> Tensor:
    """Random reference set R: ``max(1, round(fraction·N))`` of N sequences (bool mask ``[N]``)."""
    if num_sequences <= 0:
        raise ValueError(f"num_sequences must be positive, got {num_sequences}")
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"reference fraction must be in (0, 1], got {fraction}")
    n_ref = max(1, int(round(fraction * num_sequences)))
    perm = torch.randperm(num_sequences, generator=generator)
    mask = torch.zeros(num_sequences, dtype=torch.bool)
    mask[perm[:n_ref]] = True
    return mask


def world_size(group=None) -> int:
    """Ranks in ``group`` (1 without an initialised process group)."""
    return dist.get_world_size(group) if dist.is_available() and dist.is_initialized() else 1


def all_gather_rows(t: Tensor, group=None) -> Tensor:
    """Concatenate ``[n_r, ...]`` tensors of every rank along dim 0 (n_r may differ by rank).

    Identity without an initialised process group. Rows keep rank order.
    """
    world = world_size(group)
    if world == 1:
        return t
    n = torch.tensor([t.shape[0]], device=t.device, dtype=torch.long)
    counts = [torch.zeros_like(n) for _ in range(world)]
    dist.all_gather(counts, n, group=group)
    counts = [int(c.item()) for c in counts]
    pad = torch.zeros((max(counts) - t.shape[0],) + tuple(t.shape[1:]), dtype=t.dtype,
                      device=t.device)
    padded = torch.cat([t, pad]) if pad.shape[0] else t.contiguous()
    out = [torch.empty_like(padded) for _ in range(world)]
    dist.all_gather(out, padded, group=group)
    return torch.cat([o[:c] for o, c in zip(out, counts)])


class AlignmentScaler:
    """RMS scaling of alignment scores with an EMA (§2.10).

    q = RMS(sg(α)) over O, averaged over the ranks that have optimisation steps;
    m ← β·m + (1−β)·q (m starts at the first q); κ = min(κ_max, c_sc/(m + ε)).

    Built from an :class:`AlignmentConfig` (β = ``beta``, c_sc = ``target``, κ_max =
    ``max_scale``, ε = ``eps``; the dataclass holds the defaults and validates them);
    ``**settings`` replace its fields, e.g. ``AlignmentScaler(beta=0.5)``.
    """

    def __init__(self, config: AlignmentConfig | None = None, **settings):
        cfg = dataclasses.replace(config or AlignmentConfig(), **settings)
        self.beta, self.target, self.max_scale, self.eps = (cfg.beta, cfg.target, cfg.max_scale,
                                                            cfg.eps)
        self.m: float | None = None
        self.updates = 0

    @staticmethod
    def rms(alpha: Tensor, group=None) -> float | None:
        """RMS of α on this rank, averaged over ranks with a non-empty O; None if all are empty."""
        a = alpha.detach().double()
        local = torch.stack([a.pow(2).mean().sqrt() if a.numel() else a.new_zeros(()),
                             a.new_tensor(float(a.numel() > 0))])
        if world_size(group) > 1:
            dist.all_reduce(local, group=group)
        q_sum, n = float(local[0]), float(local[1])
        return q_sum / n if n > 0 else None

    def update(self, alpha: Tensor, group=None) -> float:
        """Fold this micro-batch's α into the EMA and return κ (collective when distributed)."""
        q = self.rms(alpha, group)
        if q is not None:
            self.m = q if self.m is None else self.beta * self.m + (1 - self.beta) * q
            self.updates += 1
        return self.scale

    @property
    def scale(self) -> float:
        """κ = min(κ_max, c_sc/(m + ε)); κ_max before the first update."""
        if self.m is None:
            return self.max_scale
        return min(self.max_scale, self.target / (self.m + self.eps))

    def state_dict(self) -> dict:
        return {"m": self.m, "updates": self.updates, "beta": self.beta, "target": self.target,
                "max_scale": self.max_scale, "eps": self.eps}

    def load_state_dict(self, state: dict) -> None:
        self.m = None if state["m"] is None else float(state["m"])
        self.updates = int(state["updates"])
        for key in ("beta", "target", "max_scale", "eps"):
            setattr(self, key, float(state[key]))


def center_per_rollout(g: Tensor, rollout_index: Tensor, mask: Tensor) -> Tensor:
    """g̃ = g − mean of g over the masked steps of the same rollout; 0 outside the mask (§2.10).

    Args:
        g: τ-gradients, any shape; rollout_index: same shape (int ids of the rollout of each
        step); mask: same shape, bool (the soft steps).
    Returns:
        tensor of g's shape; over each rollout's masked steps it sums to zero.
    """
    if not (g.shape == rollout_index.shape == mask.shape):
        raise ValueError(f"center_per_rollout: shapes differ: g {tuple(g.shape)}, rollout_index "
                         f"{tuple(rollout_index.shape)}, mask {tuple(mask.shape)}")
    flat_g, idx, m = g.reshape(-1), rollout_index.reshape(-1).long(), mask.reshape(-1).bool()
    if flat_g.numel() == 0:
        return g.clone()
    uniq, inv = torch.unique(idx, return_inverse=True)
    mg = torch.where(m, flat_g, torch.zeros_like(flat_g))
    sums = torch.zeros(uniq.numel(), dtype=g.dtype, device=g.device).index_add_(0, inv, mg)
    counts = torch.zeros(uniq.numel(), dtype=g.dtype, device=g.device).index_add_(
        0, inv, m.to(g.dtype))
    mean = sums / counts.clamp(min=1)
    return torch.where(m, flat_g - mean[inv], torch.zeros_like(flat_g)).view_as(g)


def controller_surrogate(g_centered: Tensor, tau_upd: Tensor) -> Tensor:
    """L̃ = Σ sg(g̃)·τ_upd: its φ-gradient is Σ_t g̃_t ∂τ_upd,t/∂φ (§2.10)."""
    return (g_centered.detach() * tau_upd).sum()
