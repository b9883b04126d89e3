"""GRPO over per-step likelihoods (docs/design.md §2.8), on verl's loss machinery.

The engine (:mod:`soft_spatial.actor.train_engine`) already returns per-step likelihoods as
``log_probs`` (soft steps: Gumbel log-density of the recorded scores; discrete steps: token
log-prob at the rollout temperature), for the old, reference and current policies alike. So the
loss is verl's own: :func:`soft_grpo_policy_loss` (registered as ``soft_grpo``, selected with
``actor_rollout_ref.actor.policy_loss.loss_mode=soft_grpo``) is the clipped surrogate
min(ρA, clip(ρ, 1−δ, 1+δ)A) with ρ = exp(ℓ − ℓ_old), aggregated by verl's ``agg_loss``; verl's
``ppo_loss`` adds the KL to the frozen reference with ``kl_penalty`` (``low_var_kl``) and the same
aggregation.

Aggregation (``actor.loss_agg_mode``). The paper's objective (eq. 8) is
1/G Σ_i 1/|o_i| Σ_t (…): each rollout averaged over its own soft steps and answer tokens, then the
mean over rollouts, which is verl's ``seq-mean-token-mean`` (``configs/train.yaml`` default; verl
divides by the global mini-batch's rollout count, so the sum over micro-batches and ranks is eq. 8
over the mini-batch). ``token-mean`` (one average over all tokens of the mini-batch, which weights
long chains more) is what the authors' released code used (verl's default): the compatibility
switch ``actor_rollout_ref.actor.loss_agg_mode=token-mean``.

KL (:class:`~soft_spatial.softthink.KLConfig`, ``rollout.custom.kl.over``): ``likelihood``
(default) is verl's estimator on the per-step likelihoods; ``candidates`` replaces it at soft steps
by the exact KL between the candidate-renormalised next-token distributions
(:func:`~soft_spatial.softthink.candidate_kl`), see :mod:`soft_spatial.softthink.kl`.

:func:`soft_ppo_loss` is the ``loss_fn`` for the actor (verl's ``ppo_loss`` plus soft-step
metrics); install it with ``set_loss_fn(partial(soft_ppo_loss, config=actor_config))``.
"""
from __future__ import annotations

import copy
import warnings
from typing import Any

import torch

from verl.trainer.ppo.core_algos import agg_loss, kl_penalty, register_policy_loss
from verl.utils import torch_functional as verl_F
from verl.utils.metric import AggregationType, Metric
from verl.workers.utils.losses import ppo_loss
from verl.workers.utils.padding import no_padding_2_padding

from soft_spatial.actor.replay_layout import padded
from soft_spatial.softthink import KLConfig, candidate_kl
from soft_spatial.softthink.trace import TRACE_PREFIX

__all__ = ["LOSS_NAME", "register", "soft_grpo_policy_loss", "soft_ppo_loss", "step_kl", "check_actor_config",
           "AGG_MODES"]

LOSS_NAME = "soft_grpo"
LOG_RATIO_CLAMP = 20.0  # as verl's vanilla loss: |ℓ − ℓ_old| is clamped before exp
#: eq. 8 (the default) and the authors' release
AGG_MODES = {"seq-mean-token-mean": "eq. 8 (paper)", "token-mean": "authors' release"}


def soft_grpo_policy_loss(old_log_prob: torch.Tensor, log_prob: torch.Tensor,
                          advantages: torch.Tensor, response_mask: torch.Tensor,
                          loss_agg_mode: str = "token-mean", config=None,
                          rollout_is_weights: torch.Tensor | None = None):
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




def step_kl(log_prob: torch.Tensor, ref_log_prob: torch.Tensor, cand_logp: torch.Tensor,
            ref_cand_logp: torch.Tensor, soft_mask: torch.Tensor, kl_type: str) -> torch.Tensor:
    """Per-step KL of the ``candidates`` reading, ``[B, R]``: the exact candidate KL at soft steps
    (``cand_logp``/``ref_cand_logp`` ``[B, R, K]``), verl's ``kl_type`` estimator on the token
    log-probs (``log_prob``/``ref_log_prob`` ``[B, R]``) at discrete steps."""
    token = kl_penalty(logprob=log_prob, ref_logprob=ref_log_prob, kl_penalty=kl_type)
    cand = candidate_kl(cand_logp, ref_cand_logp).to(token.dtype)
    return torch.where(soft_mask.bool(), cand, token)


def soft_ppo_loss(config, model_output, data, dp_group=None, kl: KLConfig | None = None):
    """verl's ``ppo_loss`` (policy loss from the registry, KL, entropy, aggregation) plus metrics
    on the soft steps of the micro-batch (their share and mean log-ratio to the old policy).

    With ``kl.over == "candidates"`` (and ``use_kl_loss``) the KL term is :func:`step_kl`, added
    with verl's coefficient and aggregation; it needs ``cand_logp`` in the model output and
    ``ref_cand_logp`` in the batch (the engine and trainer provide both in that mode)."""
    candidates = kl is not None and kl.over == "candidates" and config.use_kl_loss
    if candidates:
        missing = [k for k, src in (("cand_logp", model_output), ("ref_cand_logp", data.keys()),
                                    (TRACE_PREFIX + "soft", data.keys())) if k not in src]
        if missing:
            raise KeyError(f"kl.over=candidates needs {missing} (the soft engine's candidate "
                           f"log-probs; set rollout.custom.kl on the actor and ref workers)")
        base = copy.copy(config)  # same global_batch_info dict; verl's own KL term switched off
        object.__setattr__(base, "use_kl_loss", False)
    else:
        base = config
    loss, metrics = ppo_loss(config=base, model_output=model_output, data=data,
                             dp_group=dp_group)
    metrics = dict(metrics)
    resp = padded(data["response_mask"]).bool()
    soft_mask = padded(data[TRACE_PREFIX + "soft"]).bool() & resp if TRACE_PREFIX + "soft" in data.keys() else None
    if candidates:
        log_prob = no_padding_2_padding(model_output["log_probs"], data)
        cand = no_padding_2_padding(model_output["cand_logp"], data)
        kld = step_kl(log_prob, padded(data["ref_log_prob"]), cand,
                      padded(data["ref_cand_logp"]), soft_mask, config.kl_loss_type)
        kl_loss = agg_loss(loss_mat=kld, loss_mask=resp, loss_agg_mode=config.loss_agg_mode,
                           **config.global_batch_info)
        loss = loss + kl_loss * config.kl_loss_coef
        summed = (data["dp_size"] > 1 or data["batch_num_tokens"] is not None
                  or data["global_batch_size"] is not None or config.loss_scale_factor is not None)
        agg = AggregationType.SUM if summed else AggregationType.MEAN  # as verl's ppo_loss
        metrics["kl_loss"] = Metric(value=kl_loss, aggregation=agg)
        metrics["kl_coef"] = config.kl_loss_coef
        if soft_mask.any():
            metrics["actor/kl_soft_mean"] = kld.detach()[soft_mask].mean().item()
    if soft_mask is not None:
        metrics["actor/soft_step_frac"] = (soft_mask.sum() / resp.sum().clamp(min=1)).item()
    return loss, metrics


def check_actor_config(config: Any) -> list:
    """Warn about actor settings that depart from docs/design.md §2.8 / break the controller's
    assumptions; returns the list of messages."""
    msgs = []
    if config.loss_agg_mode not in AGG_MODES:
        msgs.append(f"loss_agg_mode={config.loss_agg_mode!r} is neither eq. 8 "
                    f"(seq-mean-token-mean) nor the authors' release (token-mean), "
                    f"docs/design.md §2.8")
    if config.use_kl_loss and config.kl_loss_type != "low_var_kl":
        msgs.append(f"kl_loss_type={config.kl_loss_type!r} (docs/design.md §2.8: low_var_kl)")
    if config.entropy_coeff:
        msgs.append(f"entropy_coeff={config.entropy_coeff}: the loss then depends on every logit "
                    f"of a soft step, so the controller's K-sparse d_t is no longer exact")
    for m in msgs:
        warnings.warn("soft_spatial actor config: " + m, RuntimeWarning, stacklevel=2)
    return msgs


def register() -> None:
    """Register :func:`soft_grpo_policy_loss` as verl's policy loss ``soft_grpo`` (idempotent)."""
    register_policy_loss(LOSS_NAME)(soft_grpo_policy_loss)
