"""Teacher-forced recomputation of a completion (the invariant the trainer relies on).

Given a prompt and a :class:`~soft_spatial.engines.base.Completion`, one uncached forward over
prompt + response, with the response inputs rebuilt from the trace by the
:func:`~soft_spatial.softthink.replay.soft_inputs` hook, yields at every step the candidate
log-probs, the mixture weights and the per-step likelihood. With the same weights they must equal
what the engine recorded while decoding (tests/engines/test_local.py). :func:`replay_gaps`
measures how far they are apart, step by step, when they are not (another dtype: the bf16 study,
``scripts/study_bf16_replay.py``).
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import torch

from soft_spatial.models.rope import prefill_position_ids
from soft_spatial.softthink import (DensityConfig, SoftThinkingConfig, candidate_logp,
                                    log_density_gap, mixture_weights, step_log_likelihood)
from soft_spatial.softthink.logits import head_logits
from soft_spatial.softthink.mixture import renormalise
from soft_spatial.softthink.replay import soft_inputs

from soft_spatial.engines.base import Completion, Prompt

__all__ = ["replay_completion", "replay_gaps", "ReplayGaps"]


@torch.no_grad()
def replay_completion(engine, prompt: Prompt, completion: Completion, temperature: float = 1.0,
                      noise_scale: float = SoftThinkingConfig.noise_scale,
                      density: DensityConfig | None = None) -> dict[str, torch.Tensor]:
    """Recompute every step of ``completion`` with one forward of ``engine``'s model.

    Returns ``logits`` [L, V], ``hidden`` [L, D], ``cand_logp`` [L, K] (of the recorded ids),
    ``weights`` [L, K] (rebuilt mixture weights, zeros at discrete steps) and ``loglik`` [L].
    """
    tr = completion.trace
    n = len(tr)
    prep = engine._prepare(0, prompt, 10 ** 9)
    p = len(prep.ids)
    ids = torch.tensor([prep.ids + tr.tokens[: n - 1].tolist()], device=engine.device)
    mask = torch.ones_like(ids)
    _, _, mm = engine._batch([prep])
    if "mm_token_type_ids" in mm:
        mm["mm_token_type_ids"] = torch.cat(
            [mm["mm_token_type_ids"], mm["mm_token_type_ids"].new_zeros(1, n - 1)], 1)
    pos, _ = prefill_position_ids(engine.model, ids, mask, **mm)
    tr = tr.to(engine.device)
    hook_mask = torch.zeros_like(ids, dtype=torch.bool)
    hook_mask[0, p:] = True

    def at_inputs(v: torch.Tensor) -> torch.Tensor:  # step t's record feeds position p + t
        full = torch.zeros((1, ids.shape[1]) + tuple(v.shape[1:]), dtype=v.dtype,
                           device=engine.device)
        full[0, p:] = v[: n - 1]
        return full

    with soft_inputs(engine.embed, hook_mask, at_inputs(tr.topk_ids), at_inputs(tr.scores),
                     at_inputs(tr.tau), at_inputs(tr.soft)):
        out = engine.base(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=False,
                          **mm)
    hidden = out.last_hidden_state[0, p - 1: p - 1 + n]
    density = density or DensityConfig()
    logits = head_logits(engine.lm_head, hidden, density.fp32_logits)
    if engine.banned_ids.numel():  # the rollout never samples these ids (LocalEngine.banned_ids)
        logits = logits.index_fill(-1, engine.banned_ids, float("-inf"))
    soft_mask = tr.soft
    tau = torch.where(soft_mask, tr.tau, torch.ones_like(tr.tau))
    weights = torch.where(soft_mask[:, None], mixture_weights(tr.scores, tau), 0.0)
    cand = torch.where(soft_mask[:, None], candidate_logp(logits, tr.topk_ids, temperature), 0.0)
    loglik = step_log_likelihood(logits, tr.topk_ids, tr.scores, soft_mask, temperature,
                                 noise_scale, density.reduce, density.clamp, density.min_logp)
    return {"logits": logits, "hidden": hidden, "cand_logp": cand, "weights": weights,
            "loglik": loglik}


@dataclass
class ReplayGaps:
    """Rollout against teacher-forced replay, per response step of a batch of completions (steps
    of every completion, in order).

    gap: ``[N]`` rollout log-likelihood − replay log-likelihood (what
        ``soft/replay_max_abs_diff*`` takes the max of); soft, first: ``[N]`` the soft steps and
        each completion's first step.
    delta: ``[Ns, K]`` Δ_k = replay − rollout candidate log-prob at the soft steps; gamma:
        ``[Ns, K]`` the rollout's noise γ_k = (z_k − log p̃_k)/c there; predicted: ``[Ns]``
        :func:`~soft_spatial.softthink.log_density_gap` of the two (exact density only).
    cand_logits: ``[Ns, K]`` the replay's candidate logits, its head's product in fp32.
    delta_head: ``[Ns, K]`` how much the replay's own head rounding moved its candidate log-probs:
        those from its logits (in the model's dtype, or fp32 under ``density.fp32_logits``) less
        those from ``cand_logits`` (0 for an fp32 model).
    """

    gap: torch.Tensor
    soft: torch.Tensor
    first: torch.Tensor
    delta: torch.Tensor
    gamma: torch.Tensor
    predicted: torch.Tensor
    cand_logits: torch.Tensor
    delta_head: torch.Tensor


@torch.no_grad()
def replay_gaps(engine, prompts, completions, temperature: float = 1.0,
                noise_scale: float = SoftThinkingConfig.noise_scale,
                density: DensityConfig | None = None) -> ReplayGaps:
    """:class:`ReplayGaps` of ``completions`` (decoded by ``engine`` with ``debug=True``, from
    ``prompts[c.prompt_index]``), each replayed by :func:`replay_completion` under ``density``."""
    parts = defaultdict(list)
    for c in completions:
        if c.debug is None or "logp" not in c.debug:
            raise ValueError("replay_gaps needs completions generated with debug=True (the "
                             "rollout's candidate log-probs)")
        r = replay_completion(engine, prompts[c.prompt_index], c, temperature, noise_scale,
                              density)
        soft = c.trace.soft.to(r["loglik"].device)
        first = torch.zeros_like(soft)
        first[0] = True
        roll = torch.tensor(c.logprobs, dtype=torch.float64)
        parts["gap"].append(roll - r["loglik"].double().cpu())
        parts["soft"].append(soft.cpu())
        parts["first"].append(first.cpu())
        logp = c.debug["logp"].double()[soft.cpu()]
        parts["delta"].append(r["cand_logp"].double().cpu()[soft.cpu()] - logp)
        parts["gamma"].append((c.trace.scores.double()[soft.cpu()] - logp) / noise_scale)
        ids = c.trace.topk_ids.to(r["logits"].device)[soft]
        exact = head_logits(engine.lm_head, r["hidden"][soft], True).gather(-1, ids)
        parts["cand_logits"].append(exact.cpu())
        parts["delta_head"].append(
            (r["cand_logp"][soft].double() - renormalise(exact.double() / temperature)).cpu())
    out = {k: torch.cat(v) for k, v in parts.items()}
    out["predicted"] = log_density_gap(out["gamma"], out["delta"], noise_scale)
    return ReplayGaps(**out)
