"""Gumbel log-density of recorded perturbed scores (DESIGN.md §2.6, paper eq. 5).

At a soft step the rollout recorded z_k = log p̃_k + c·γ_k over its K candidates. Under a policy θ
the recovered noise is γ̃_k = (z_k − log p̃^θ_k)/c and

    log P_θ(z) = Σ_{k∈C} [−γ̃_k − exp(−γ̃_k)] − K·log c.

The gradient reaches the logits only through log p̃^θ (K-sparse). The soft importance ratio is
ρ = exp(log P_θ − log P_old).
"""
from __future__ import annotations

import math
from typing import Optional, Tuple

import torch
from torch import Tensor

from .mixture import upcast

__all__ = ["gumbel_log_density", "candidate_logp", "soft_step_log_density", "step_log_likelihood",
           "EXP_CAP"]

# Numerical safety (any finite input gives a finite value and gradient):
# * exp(−γ̃) is continued by its tangent line beyond −γ̃ > EXP_CAP, so it grows linearly there;
# * γ̃ is bounded to ±G_BOUND (only reachable when z − log p̃ overflows), so the linear branch stays
#   below e^30·1e20 ≈ 1e33 < fp32 max.
# A sampled Gumbel gives −γ̃ > 30 with probability exp(−e^30): below the cap the formula is exact.
EXP_CAP = 30.0
G_BOUND = 1e20


def _safe_exp(x: Tensor) -> Tensor:
    """exp(x) for x ≤ EXP_CAP, and its tangent line e^cap·(1 + x − cap) above (C¹, finite)."""
    capped = x.clamp(max=EXP_CAP)
    e = torch.exp(capped)
    return torch.where(x > EXP_CAP, e * (1.0 + (x - EXP_CAP)), e)


def candidate_logp(logits: Tensor, ids: Tensor, temperature: float = 1.0) -> Tensor:
    """log p̃^θ_k of given candidate ids: ℓ_k/T − logsumexp_{j∈C} ℓ_j/T (fp32, ``[..., K]``).

    Unlike :func:`~soft_spatial.softthink.mixture.candidates` the ids are fixed (the recorded
    ones), so this is the quantity the policy is scored on at replay.
    """
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    sel = upcast(logits.gather(-1, ids)) / temperature
    return sel - torch.logsumexp(sel, dim=-1, keepdim=True)


def gumbel_log_density(z: Tensor, logp: Tensor, noise_scale: float = 1.0, reduce: str = "sum",
                       clamp: Optional[Tuple[float, float]] = None,
                       min_logp: Optional[float] = None) -> Tensor:
    """Log-density of recorded scores z under candidate log-probs log p̃^θ (eq. 5).

    Args:
        z: ``[..., K]`` recorded perturbed scores.
        logp: ``[..., K]`` log p̃^θ of the same candidates under the scored policy.
        noise_scale: c > 0 used at rollout.
        reduce: ``"sum"`` (the density, default) or ``"mean"`` over the (unmasked) slots.
        clamp: clip γ̃ to ``(lo, hi)`` (compatibility switch; the reference uses (−1.5, 3)).
        min_logp: keep only slots with log p̃^θ > min_logp (compatibility switch; reference −3).
    Returns:
        ``[...]`` fp32 log-density, finite for any finite input.

    The defaults give the exact density; ``reduce="mean"``, ``clamp=(-1.5, 3.0)`` and
    ``min_logp=-3.0`` together reproduce the SofT-GRPO / reference-implementation variant.
    """
    if noise_scale <= 0:
        raise ValueError(f"noise_scale must be > 0 to score a soft step, got {noise_scale}")
    if reduce not in ("sum", "mean"):
        raise ValueError(f"reduce must be 'sum' or 'mean', got {reduce!r}")
    logp = upcast(logp)
    g = ((upcast(z).to(logp.dtype) - logp) / noise_scale).clamp(-G_BOUND, G_BOUND)
    if clamp is not None:
        g = g.clamp(clamp[0], clamp[1])
    per_slot = -g - _safe_exp(-g) - math.log(noise_scale)
    if min_logp is not None:
        mask = (logp > min_logp).to(per_slot.dtype)
        total = (per_slot * mask).sum(-1)
        count = mask.sum(-1)
    else:
        total = per_slot.sum(-1)
        count = torch.full_like(total, per_slot.shape[-1])
    if reduce == "mean":
        return total / count.clamp(min=1.0)
    return total


def soft_step_log_density(logits: Tensor, ids: Tensor, z: Tensor, temperature: float = 1.0,
                          **kwargs) -> Tensor:
    """Convenience: log P_θ(z) straight from logits ``[..., V]`` and a record (ids, z)."""
    return gumbel_log_density(z, candidate_logp(logits, ids, temperature), **kwargs)



def step_log_likelihood(logits: Tensor, topk_ids: Tensor, scores: Tensor, soft: Tensor,
                        temperature: float = 1.0, noise_scale: float = 1.0, reduce: str = "sum",
                        clamp: Optional[Tuple[float, float]] = None,
                        min_logp: Optional[float] = None) -> Tensor:
    """Per-step likelihood used by GRPO (§2.8): log P_θ(z) at soft steps, log p_θ(token) at T for
    discrete steps (token = ``topk_ids[..., 0]``).

    Args: logits ``[..., V]`` that produced each step; records ``[..., K]``; ``soft`` ``[...]``.
    Returns ``[...]`` fp32. Only the K candidate logits of a soft step get gradient.
    """
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    soft = soft.bool()
    token_lp = torch.log_softmax(upcast(logits) / temperature, dim=-1).gather(
        -1, topk_ids[..., :1]).squeeze(-1)
    if not soft.any():
        return token_lp
    dens = gumbel_log_density(scores, candidate_logp(logits, topk_ids, temperature),
                              noise_scale=noise_scale if noise_scale > 0 else 1.0, reduce=reduce,
                              clamp=clamp, min_logp=min_logp)
    return torch.where(soft, dens, token_lp)
