"""Gumbel top-K soft steps: candidates, perturbation, mixture weights, soft embedding, spine.

docs/design.md §2.1–2.4. Shapes: ``[..., V]`` logits, ``[..., K]`` candidate tensors, ``[..., D]``
embeddings; any leading batch shape. Everything here is pure PyTorch and computes in fp32 (fp64
inputs stay fp64, for reference checks), whatever the model's dtype, so a rollout and its replay
compute the same numbers.
"""
from __future__ import annotations

import math

import torch
from torch import Tensor, nn

__all__ = [
    "candidates",
    "renormalise",
    "perturb",
    "mixture_weights",
    "soft_embedding",
    "spine",
    "normalized_entropy",
    "sort_by_score",
    "soft_step",
    "gumbel_from_uniform",
    "record_input_embeddings",
    "record_weights",
]


def upcast(x: Tensor) -> Tensor:
    """At least fp32: bf16/fp16/fp32 → fp32, fp64 stays fp64."""
    return x if x.dtype == torch.float64 else x.float()


def candidates(logits: Tensor, k: int, temperature: float = 1.0) -> tuple[Tensor, Tensor]:
    """Top-K candidates and their renormalised log-probabilities (§2.1).

    C = the K ids of largest softmax(ℓ/T); log p̃_k = ℓ_k/T − logsumexp_{j∈C} ℓ_j/T.
    The full-vocabulary normaliser cancels, so ``logp`` depends on the K candidate logits only.

    Args:
        logits: ``[..., V]`` next-token logits.
        k: number of candidates K (1 ≤ K ≤ V).
        temperature: sampling temperature T > 0.
    Returns:
        ``ids`` ``[..., K]`` int64 and ``logp`` ``[..., K]`` fp32, sorted by descending probability.
    """
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    if not 1 <= k <= logits.shape[-1]:
        raise ValueError(f"top_k must be in [1, vocab={logits.shape[-1]}], got {k}")
    scaled = upcast(logits) / temperature
    top, ids = torch.topk(scaled, k, dim=-1, largest=True, sorted=True)
    return ids, renormalise(top)


def renormalise(scaled: Tensor) -> Tensor:
    """log p̃ = x − logsumexp(x) over the last dim (the K candidates' ℓ/T), as a log-softmax: the
    maximum is subtracted first, so it stays float64-accurate to ~1e-7 even at |x| ≈ 1e4 (§2.1)."""
    return torch.log_softmax(upcast(scaled), dim=-1)


def gumbel_from_uniform(u: Tensor, clamp: tuple[float, float] | None = None) -> Tensor:
    """Standard Gumbel samples γ = −log(−log U) from uniforms U ∈ [0, 1) (kept inside (0, 1)).

    Engines draw the uniforms with :func:`~soft_spatial.softthink.noise.noise_uniforms` (§2.2),
    one block per row and step, so a row's noise does not depend on what else is in the batch.
    """
    tiny = torch.finfo(u.dtype).tiny
    u = u.clamp(min=tiny, max=1.0 - torch.finfo(u.dtype).eps)
    g = -torch.log(-torch.log(u))
    return g.clamp(clamp[0], clamp[1]) if clamp is not None else g


def perturb(logp: Tensor, noise_scale: float, noise: Tensor) -> Tensor:
    """Perturbed scores z_k = log p̃_k + c·γ_k with γ_k ~ Gumbel(0, 1) i.i.d. (§2.2).

    ``noise_scale`` = c ≥ 0 (0 gives z = log p̃, deterministic); ``noise`` holds the standard
    Gumbel samples γ, logp's shape (:func:`gumbel_from_uniform`, which also applies the
    reference implementation's optional clamp).
    """
    if noise_scale < 0:
        raise ValueError(f"noise_scale must be >= 0, got {noise_scale}")
    logp = upcast(logp)
    if noise_scale == 0:
        return logp.clone()
    if noise.shape != logp.shape:
        raise ValueError(f"noise shape {tuple(noise.shape)} != logp shape {tuple(logp.shape)}")
    return logp + noise_scale * noise.to(logp.dtype)


def _tau_tensor(tau: float | Tensor, z: Tensor) -> Tensor:
    if isinstance(tau, Tensor):
        t = tau.to(device=z.device, dtype=z.dtype)
        if t.dim() == z.dim():  # already [..., 1]
            return t
        return t.unsqueeze(-1)
    if not tau > 0:
        raise ValueError(f"tau must be > 0, got {tau}")
    return torch.tensor(float(tau), dtype=z.dtype, device=z.device)


def mixture_weights(z: Tensor, tau: float | Tensor) -> Tensor:
    """Mixture weights w = softmax(z/τ) over the last dim, in fp32 (§2.3).

    ``tau`` is a float or a tensor broadcastable to z's leading shape (``[...]`` or ``[..., 1]``).
    The same expression is used at rollout and at replay, so the weights match bit for bit.
    """
    z = upcast(z)
    return torch.softmax(z / _tau_tensor(tau, z), dim=-1)


def soft_embedding(embedding: nn.Embedding | Tensor, ids: Tensor, weights: Tensor) -> Tensor:
    """Soft input s = Σ_k w_k E[C_k] (§2.3).

    Args:
        embedding: an ``nn.Embedding`` or its weight ``[V, D]``.
        ids: ``[..., K]`` candidate ids. weights: ``[..., K]`` (fp32).
    Returns:
        ``[..., D]`` in the embedding's dtype; the weighted sum is accumulated in fp32.
    """
    weight = embedding.weight if isinstance(embedding, nn.Embedding) else embedding
    rows = nn.functional.embedding(ids, weight)  # [..., K, D]
    w = upcast(weights)
    mixed = (w.unsqueeze(-1) * rows.to(w.dtype)).sum(dim=-2)
    return mixed.to(weight.dtype)


def spine(ids: Tensor, z: Tensor) -> Tensor:
    """The discrete spine: the candidate with the largest perturbed score, ``ids[..., argmax z]``."""
    return ids.gather(-1, z.argmax(dim=-1, keepdim=True)).squeeze(-1)


def normalized_entropy(logp: Tensor) -> Tensor:
    """Ĥ = −Σ_k p̃_k log p̃_k / log K ∈ [0, 1] over the last dim (§2.4). K = 1 gives 0."""
    k = logp.shape[-1]
    if k <= 1:
        return torch.zeros(logp.shape[:-1], dtype=upcast(logp).dtype, device=logp.device)
    logp = upcast(logp)
    h = -(logp.exp() * logp).nan_to_num(0.0).sum(-1) / math.log(k)
    return h.clamp(0.0, 1.0)


def sort_by_score(z: Tensor, *tensors: Tensor) -> tuple[Tensor, ...]:
    """Reorder the K slots by descending z (record order, docs/design.md §3: slot 0 = spine).

    Returns ``(z_sorted, *tensors_sorted)``; every tensor is ``[..., K]``.
    """
    order = torch.argsort(z, dim=-1, descending=True, stable=True)
    return (z.gather(-1, order),) + tuple(t.gather(-1, order) for t in tensors)


def soft_step(logits: Tensor, k: int, temperature: float, noise_scale: float,
              noise: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """One soft sampling step: candidates → perturbation by ``noise`` (``[..., K]`` standard
    Gumbel samples) → slots sorted by z.

    Returns ``(ids, z, logp)`` each ``[..., K]`` with slot 0 the spine. Mixture weights follow from
    ``mixture_weights(z, tau)`` once τ is known (the controller needs ``logp`` for its entropy
    feature first).
    """
    ids, logp = candidates(logits, k, temperature)
    z = perturb(logp, noise_scale, noise)
    z, ids, logp = sort_by_score(z, ids, logp)
    return ids, z, logp


def record_weights(scores: Tensor, tau: Tensor, soft_mask: Tensor) -> Tensor:
    """The mixture weights ``[..., K]`` a sequence of records stands for (§2.3, §3): softmax(z/τ)
    at soft records, one-hot on slot 0 (the emitted token) at discrete records (τ ignored)."""
    soft_mask = soft_mask.bool()
    tau = torch.where(soft_mask, upcast(tau), torch.ones_like(upcast(tau)))
    w = mixture_weights(scores, tau)
    one_hot = torch.zeros_like(w)
    one_hot[..., 0] = 1.0
    return torch.where(soft_mask.unsqueeze(-1), w, one_hot)


def record_input_embeddings(embedding: nn.Embedding | Tensor, topk_ids: Tensor,
                            scores: Tensor, tau: Tensor, soft_mask: Tensor) -> Tensor:
    """The next-step inputs a sequence of records stands for (§2.3, §3).

    Soft records give Σ_k softmax(z/τ)_k E[ids_k]; discrete records give E[ids_0] exactly (their τ
    is ignored). Shapes ``[..., K]`` ids/scores, ``[...]`` tau/soft_mask → ``[..., D]``. Used both by the
    engines (next decode input) and at replay, so both sides compute identical weights.
    """
    return soft_embedding(embedding, topk_ids, record_weights(scores, tau, soft_mask))
