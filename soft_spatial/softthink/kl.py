"""KL to the frozen reference at a soft step (docs/design.md §2.8).

Two readings of the paper's "KL to the reference over the LVLM's next-token distributions":

* ``likelihood`` (default; the authors' release): verl's per-token estimator (``low_var_kl``, k3)
  applied to the per-step likelihoods, i.e. at a soft step to the Gumbel log-densities
  log P_θ(z) and log P_ref(z) of the recorded scores. For one candidate the recorded score is a
  Gumbel shifted by log p̃_k, and two shifted Gumbels differ by
  KL(Gumbel(a) ‖ Gumbel(b)) = δ − 1 + e^{−δ}, δ = a − b, so in expectation over the rollout's
  noise (c = 1) this term is :func:`gumbel_density_kl` = Σ_k (e^{−δ_k} + δ_k − 1),
  δ_k = log p̃^θ_k − log p̃^ref_k: an *unweighted* divergence of the K candidate log-probabilities.
* ``candidates``: :func:`candidate_kl`, the exact KL between the two policies' next-token
  distributions renormalised over the recorded top-K candidates,
  KL(p̃^θ ‖ p̃^ref) = Σ_k p̃^θ_k (log p̃^θ_k − log p̃^ref_k), weighted by the policy's own
  probabilities. It needs the reference's K candidate log-probs per soft step (what the reference
  scores anyway) and stays K-sparse in the logits, so the controller's alignment signal (§2.9)
  remains exact. Discrete steps keep the estimator on the sampled token's log-prob in both
  readings (the only part of that distribution both policies score).

Both vanish exactly when the candidate distributions agree and are ≥ 0.
"""
from __future__ import annotations

import torch
from torch import Tensor

from soft_spatial.softthink.config import KL_OVER, SoftThinkingConfig
from soft_spatial.softthink.mixture import upcast

__all__ = ["candidate_kl", "gumbel_density_kl", "KL_OVER"]

def candidate_kl(logp: Tensor, ref_logp: Tensor) -> Tensor:
    """KL(p̃^θ ‖ p̃^ref) over the K recorded candidates.

    Args:
        logp: ``[..., K]`` log p̃^θ (renormalised over the candidates, gradient flows here).
        ref_logp: ``[..., K]`` log p̃^ref of the same candidates (treated as a constant).
    Returns ``[...]`` (fp32, fp64 for fp64 input), ≥ 0 up to rounding.
    """
    if logp.shape != ref_logp.shape:
        raise ValueError(f"candidate_kl: logp {tuple(logp.shape)} and ref_logp "
                         f"{tuple(ref_logp.shape)} must have the same shape")
    logp = upcast(logp)
    ref = upcast(ref_logp).to(logp.dtype)
    return (logp.exp() * (logp - ref)).sum(-1)


def gumbel_density_kl(logp: Tensor, ref_logp: Tensor,
                      noise_scale: float = SoftThinkingConfig.noise_scale) -> Tensor:
    """E_z[log P_θ(z) − log P_ref(z)] for z drawn by the θ rollout with noise scale c: the quantity
    the ``likelihood`` reading's per-step estimators target at a soft step,
    Σ_k (e^{−δ_k/c} + δ_k/c − 1). ``[..., K]`` → ``[...]``."""
    if noise_scale <= 0:
        raise ValueError(f"noise_scale must be > 0, got {noise_scale}")
    d = (upcast(logp) - upcast(ref_logp).to(upcast(logp).dtype)) / noise_scale
    return (torch.exp(-d) + d - 1.0).sum(-1)
