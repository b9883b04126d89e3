"""GRPO over per-step likelihoods (DESIGN.md §2.8), on verl's loss machinery.

The engine (:mod:`soft_spatial.actor.engine`) already returns per-step likelihoods as
``log_probs`` (soft steps: Gumbel log-density of the recorded scores; discrete steps: token
log-prob at the rollout temperature), for the old, reference and current policies alike. So the
loss is verl's own: :func:`soft_grpo_policy_loss` (registered as ``soft_grpo``, selected with
``actor_rollout_ref.actor.policy_loss.loss_mode=soft_grpo``) is the clipped surrogate
min(ρA, clip(ρ, 1−δ, 1+δ)A) with ρ = exp(ℓ − ℓ_old), aggregated by verl's ``agg_loss``; verl's
``ppo_loss`` adds the KL to the frozen reference with ``kl_penalty`` (``low_var_kl``) and the same
aggregation. ``token-mean`` over the response mask averages over soft steps and answer tokens
together.

:func:`soft_ppo_loss` is the ``loss_fn`` for the actor (verl's ``ppo_loss`` plus soft-step
metrics); install it with ``set_loss_fn(partial(soft_ppo_loss, config=actor_config))``.
"""
from __future__ import annotations

import warnings
from typing import Any, Optional

import torch

from verl.trainer.ppo.core_algos import agg_loss, register_policy_loss
from verl.utils import torch_functional as verl_F
from verl.workers.utils.losses import ppo_loss

__all__ = ["LOSS_NAME", "soft_grpo_policy_loss", "soft_ppo_loss", "check_actor_config"]

LOSS_NAME = "soft_grpo"
LOG_RATIO_CLAMP = 20.0  # as verl's vanilla loss: |ℓ − ℓ_old| is clamped before exp


@register_policy_loss(LOSS_NAME)
def soft_grpo_policy_loss(old_log_prob: torch.Tensor, log_prob: torch.Tensor,
                          advantages: torch.Tensor, response_mask: torch.Tensor,
                          loss_agg_mode: str = "token-mean", config=None,
                          rollout_is_weights: Optional[torch.Tensor] = None):
    """Clipped surrogate over per-step likelihoods (verl ``PolicyLossFn`` signature).

    All tensors ``[B, R]``; δ from ``config.clip_ratio`` (``clip_ratio_low``/``_high`` if set).
    Returns (loss, metrics).
    """
    if config is None:
        raise ValueError("soft_grpo needs the actor config (clip ratios, global batch info)")
    mask = response_mask.bool()
    low = config.clip_ratio_low if config.clip_ratio_low is not None else config.clip_ratio
    high = config.clip_ratio_high if config.clip_ratio_high is not None else config.clip_ratio
    log_ratio = (log_prob - old_log_prob).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    ratio = torch.exp(log_ratio)
    unclipped = -advantages * ratio
    clipped = -advantages * ratio.clamp(1.0 - low, 1.0 + high)
    losses = torch.maximum(unclipped, clipped)
    if rollout_is_weights is not None:
        losses = losses * rollout_is_weights
    loss = agg_loss(loss_mat=losses, loss_mask=mask, loss_agg_mode=loss_agg_mode,
                    **config.global_batch_info)
    metrics = {
        "actor/pg_clipfrac": verl_F.masked_mean((clipped > unclipped).float(), mask).item(),
        "actor/ppo_kl": verl_F.masked_mean(-log_ratio, mask).detach().item(),
    }
    return loss, metrics


def soft_ppo_loss(config, model_output, data, dp_group=None):
    """verl's ``ppo_loss`` (policy loss from the registry, KL, entropy, aggregation) plus metrics
    on the soft steps of the micro-batch (their share and mean log-ratio to the old policy)."""
    loss, metrics = ppo_loss(config=config, model_output=model_output, data=data,
                             dp_group=dp_group)
    if "trace_soft" in data.keys():
        soft = data["trace_soft"]
        soft = torch.nested.to_padded_tensor(soft, 0) if soft.is_nested else soft
        resp = data["response_mask"]
        resp = torch.nested.to_padded_tensor(resp, 0) if resp.is_nested else resp
        soft = soft.bool() & resp.bool()
        metrics = dict(metrics)
        metrics["actor/soft_step_frac"] = (soft.sum() / resp.sum().clamp(min=1)).item()
    return loss, metrics


def check_actor_config(config: Any) -> list:
    """Warn about actor settings that depart from DESIGN §2.8 / break the controller's
    assumptions; returns the list of messages."""
    msgs = []
    if config.loss_agg_mode != "token-mean":
        msgs.append(f"loss_agg_mode={config.loss_agg_mode!r} (DESIGN §2.8: token-mean)")
    if config.use_kl_loss and config.kl_loss_type != "low_var_kl":
        msgs.append(f"kl_loss_type={config.kl_loss_type!r} (DESIGN §2.8: low_var_kl)")
    if config.entropy_coeff:
        msgs.append(f"entropy_coeff={config.entropy_coeff}: the loss then depends on every logit "
                    f"of a soft step, so the controller's K-sparse d_t is no longer exact")
    for m in msgs:
        warnings.warn("soft_spatial actor config: " + m, RuntimeWarning, stacklevel=2)
    return msgs
