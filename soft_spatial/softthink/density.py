"""Gumbel log-density of recorded perturbed scores (docs/design.md §2.6, paper eq. 5).

At a soft step the rollout recorded z_k = log p̃_k + c·γ_k over its K candidates. Under a policy θ
the recovered noise is γ̃_k = (z_k − log p̃^θ_k)/c and

    log P_θ(z) = Σ_{k∈C} [−γ̃_k − exp(−γ̃_k)] − K·log c.

The gradient reaches the logits only through log p̃^θ (K-sparse). The soft importance ratio is
ρ = exp(log P_θ − log P_old).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from soft_spatial.softthink.config import DensityConfig, SoftThinkingConfig
from soft_spatial.softthink.mixture import renormalise, upcast

__all__ = ["gumbel_log_density", "candidate_logp", "soft_step_log_density", "step_log_likelihood",
           "step_likelihood", "StepLikelihood", "token_log_prob", "log_density_gap", "EXP_CAP"]

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
    return renormalise(upcast(logits.gather(-1, ids)) / temperature)


def _scaled_rows(logits: Tensor, rows: slice, temperature: Tensor, banned: Tensor) -> Tensor:
    x = upcast(logits[rows]) / temperature[rows, None]
    if banned.numel():
        x.index_fill_(-1, banned, float("-inf"))
    return x


class _TokenLogProb(torch.autograd.Function):
    """log softmax(ℓ/T)[token] row by row in chunks: neither pass materialises an fp32 [N, V]
    tensor (forward keeps the logsumexp per row, backward recomputes softmax per chunk)."""

    @staticmethod
    def forward(ctx, logits, tokens, temperature, banned, chunk):
        n = logits.shape[0]
        dtype = torch.float64 if logits.dtype == torch.float64 else torch.float32
        lse = torch.empty(n, dtype=dtype, device=logits.device)
        out = torch.empty(n, dtype=dtype, device=logits.device)
        for s in range(0, n, chunk):
            r = slice(s, s + chunk)
            x = _scaled_rows(logits, r, temperature, banned)
            lse[r] = torch.logsumexp(x, dim=-1)
            out[r] = x.gather(-1, tokens[r, None]).squeeze(-1) - lse[r]
        ctx.save_for_backward(logits, tokens, temperature, banned, lse)
        ctx.chunk = chunk
        return out

    @staticmethod
    def backward(ctx, grad_out):
        logits, tokens, temperature, banned, lse = ctx.saved_tensors
        grad = torch.empty_like(logits)
        for s in range(0, logits.shape[0], ctx.chunk):
            r = slice(s, s + ctx.chunk)
            g = grad_out[r, None].to(lse.dtype)
            d = torch.exp(_scaled_rows(logits, r, temperature, banned) - lse[r, None]).mul_(-g)
            d.scatter_add_(-1, tokens[r, None], g)
            grad[r] = (d / temperature[r, None]).to(grad.dtype)
        return grad, None, None, None, None


def token_log_prob(logits: Tensor, tokens: Tensor, temperature: float | Tensor = 1.0,
                   banned: Tensor | None = None, chunk_elements: int = 1 << 25) -> Tensor:
    """log softmax(ℓ/T)[token] of each row (a discrete step's likelihood, §2.8).

    Args:
        logits: ``[N, V]`` in any float dtype; tokens: ``[N]`` int64.
        temperature: T > 0, a float or a per-row tensor ``[N]``.
        banned: ids excluded from the normaliser (never emittable), or None.
        chunk_elements: rows are processed ``chunk_elements // V`` at a time, which bounds the
            fp32 temporaries of both passes (default 2²⁵ elements, 128 MiB).
    Returns ``[N]`` fp32 (fp64 for fp64 logits); the gradient reaches ``logits`` only.
    """
    n, v = logits.shape
    t = torch.as_tensor(temperature, dtype=torch.float64 if logits.dtype == torch.float64
                        else torch.float32, device=logits.device).expand(n).contiguous()
    if bool((t <= 0).any()):
        raise ValueError("temperature must be > 0")
    banned = (torch.zeros(0, dtype=torch.long, device=logits.device) if banned is None
              else banned.to(logits.device, torch.long))
    return _TokenLogProb.apply(logits, tokens.long(), t, banned, max(1, chunk_elements // v))


def gumbel_log_density(z: Tensor, logp: Tensor, noise_scale: float = SoftThinkingConfig.noise_scale,
                       reduce: str = DensityConfig.reduce,
                       clamp: tuple[float, float] | None = None,
                       min_logp: float | None = None) -> Tensor:
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


def log_density_gap(gamma: Tensor, delta: Tensor,
                    noise_scale: float = SoftThinkingConfig.noise_scale) -> Tensor:
    """log P_old(z) − log P_new(z) of one soft step (eq. 5, the exact density) when the scoring
    policy's candidate log-probs move by ``delta`` ``[..., K]`` (Δ_k = log p̃^new_k − log p̃^old_k)
    and the recorded scores are z = log p̃^old + c·γ with noise ``gamma`` ``[..., K]``:

        Σ_k [e^{−γ_k}(e^{Δ_k/c} − 1) − Δ_k/c]      (≈ Σ_k (e^{−γ_k} − 1)Δ_k/c for small Δ).

    What a rollout/replay mismatch Δ costs the consistency check: e^{−γ} is Exp(1)-distributed
    (mean 1, so the first-order term averages 0 and the mean gap is Σ_k (e^{Δ_k/c} − 1 − Δ_k/c)
    ≈ ½Σ_k Δ_k²/c²), and its tail multiplies Δ in the largest gaps of a batch. Returns ``[...]``
    in the inputs' dtype (at least fp32)."""
    g = upcast(gamma)
    d = upcast(delta).to(g.dtype) / noise_scale
    return (torch.exp(-g) * torch.expm1(d) - d).sum(-1)


def soft_step_log_density(logits: Tensor, ids: Tensor, z: Tensor, temperature: float = 1.0,
                          **kwargs) -> Tensor:
    """Convenience: log P_θ(z) straight from logits ``[..., V]`` and a record (ids, z)."""
    return gumbel_log_density(z, candidate_logp(logits, ids, temperature), **kwargs)



@dataclass
class StepLikelihood:
    """Per-step likelihoods of N steps and the two tensors the logits reach them through.

    ``cand_logits`` ``[Ns, K]`` are the candidate logits of the soft steps ``soft_rows`` and
    ``disc_logits`` ``[Nd, V]`` the logit rows of the discrete steps ``disc_rows``: the gradient of
    any function of ``loglik`` with respect to these two is the logit gradient d_t of §2.9,
    K-sparse at soft steps (``cand_logits`` holds exactly their non-zero entries).
    """

    loglik: Tensor  # [N]
    soft_rows: Tensor  # [Ns] int64
    cand_logits: Tensor  # [Ns, K]
    disc_rows: Tensor  # [Nd] int64
    disc_logits: Tensor  # [Nd, V]
    cand_logp: Tensor | None = None  # [Ns, K] log p̃^θ of the soft steps' candidates at T


def step_likelihood(logits: Tensor, topk_ids: Tensor, scores: Tensor, soft_mask: Tensor,
                    temperature: float | Tensor = 1.0,
                    noise_scale: float = SoftThinkingConfig.noise_scale,
                    reduce: str = DensityConfig.reduce, clamp: tuple[float, float] | None = None,
                    min_logp: float | None = None, rows: Tensor | None = None,
                    banned: Tensor | None = None) -> StepLikelihood:
    """Per-step likelihood used by GRPO (§2.8): log P_θ(z) at soft steps, log p_θ(token) at T at
    discrete steps (token = ``topk_ids[:, 0]``), for N steps.

    Args:
        logits: ``[M, V]``; step n's logits are ``logits[rows[n]]`` (``rows`` None: M = N, in
            order). Only the K candidate logits of a soft step, and the row of a discrete step,
            are read, so no [N, V] copy is made for soft steps.
        topk_ids, scores: ``[N, K]`` records; soft_mask: ``[N]``.
        temperature: T, a float or per-step ``[N]``. banned: ids outside every discrete step's
            normaliser (those the rollout never samples).
    Returns a :class:`StepLikelihood`; ``loglik`` is fp32 (fp64 for fp64 logits).
    """
    if rows is None:
        rows = torch.arange(logits.shape[0], device=logits.device)
    soft_mask = soft_mask.bool()
    n = soft_mask.shape[0]
    dtype = torch.float64 if logits.dtype == torch.float64 else torch.float32
    t = torch.as_tensor(temperature, dtype=dtype, device=logits.device).expand(n)
    if bool((t <= 0).any()):
        raise ValueError("temperature must be > 0")
    s_rows, d_rows = soft_mask.nonzero().squeeze(-1), (~soft_mask).nonzero().squeeze(-1)
    ids_s = topk_ids[s_rows]
    cand = logits[rows[s_rows, None], ids_s]  # [Ns, K], gathered without an [Ns, V] copy
    disc = logits.index_select(0, rows[d_rows])  # [Nd, V]
    loglik = torch.zeros(n, dtype=dtype, device=logits.device)
    logp = renormalise(upcast(cand) / t[s_rows, None])
    if s_rows.numel():
        dens = gumbel_log_density(scores[s_rows], logp,
                                  noise_scale=noise_scale if noise_scale > 0 else 1.0,
                                  reduce=reduce, clamp=clamp, min_logp=min_logp)
        loglik = loglik.index_put((s_rows,), dens.to(dtype))
    if d_rows.numel():
        tok = token_log_prob(disc, topk_ids[d_rows, 0], t[d_rows], banned)
        loglik = loglik.index_put((d_rows,), tok.to(dtype))
    return StepLikelihood(loglik, s_rows, cand, d_rows, disc, logp)


def step_log_likelihood(logits: Tensor, topk_ids: Tensor, scores: Tensor, soft_mask: Tensor,
                        temperature: float = 1.0,
                        noise_scale: float = SoftThinkingConfig.noise_scale,
                        reduce: str = DensityConfig.reduce,
                        clamp: tuple[float, float] | None = None,
                        min_logp: float | None = None) -> Tensor:
    """:func:`step_likelihood`'s values for logits ``[..., V]`` and records ``[..., K]`` /
    ``[...]`` of the same leading shape; returns ``[...]``."""
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    lead = soft_mask.shape
    out = step_likelihood(logits.reshape(-1, logits.shape[-1]), topk_ids.reshape(-1, topk_ids.shape[-1]),
                          scores.reshape(-1, scores.shape[-1]), soft_mask.reshape(-1), temperature,
                          noise_scale, reduce, clamp, min_logp)
    return out.loglik.reshape(lead)
