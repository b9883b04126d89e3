"""Teacher-forced recomputation of a completion (the invariant the trainer relies on).

Given a prompt and a :class:`~soft_spatial.engines.base.Completion`, one uncached forward over
prompt + response, with the response inputs rebuilt from the trace by the
:func:`~soft_spatial.softthink.replay.soft_inputs` hook, yields at every step the candidate
log-probs, the mixture weights and the per-step likelihood. With the same weights they must equal
what the engine recorded while decoding (tests/engines/test_local.py).
"""
from __future__ import annotations


import torch

from soft_spatial.models.rope import prefill_position_ids
from soft_spatial.softthink import (DensityConfig, SoftThinkingConfig, candidate_logp,
                                    mixture_weights, step_log_likelihood)
from soft_spatial.softthink.replay import soft_inputs

from soft_spatial.engines.base import Completion, Prompt

__all__ = ["replay_completion"]


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
    rec = {key: getattr(tr, key).to(engine.device) for key in ("topk_ids", "scores", "tau",
                                                                "soft")}
    hook_mask = torch.zeros_like(ids, dtype=torch.bool)
    hook_mask[0, p:] = True
    full = {key: torch.zeros((1, ids.shape[1]) + tuple(v.shape[1:]), dtype=v.dtype,
                             device=engine.device) for key, v in rec.items()}
    for key, v in rec.items():
        full[key][0, p:] = v[: n - 1]
    with soft_inputs(engine.embed, hook_mask, full["topk_ids"], full["scores"], full["tau"],
                     full["soft"]):
        out = engine.base(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=False,
                          **mm)
    hidden = out.last_hidden_state[0, p - 1: p - 1 + n]
    logits = engine.lm_head(hidden)
    if engine.banned_ids.numel():  # the rollout never samples these ids (LocalEngine.banned_ids)
        logits = logits.index_fill(-1, engine.banned_ids, float("-inf"))
    density = density or DensityConfig()
    soft_mask = rec["soft"]
    tau = torch.where(soft_mask, rec["tau"], torch.ones_like(rec["tau"]))
    weights = torch.where(soft_mask[:, None], mixture_weights(rec["scores"], tau), 0.0)
    cand = torch.where(soft_mask[:, None], candidate_logp(logits, rec["topk_ids"], temperature), 0.0)
    loglik = step_log_likelihood(logits, rec["topk_ids"], rec["scores"], soft_mask, temperature,
                                 noise_scale, density.reduce, density.clamp, density.min_logp)
    return {"logits": logits, "hidden": hidden, "cand_logp": cand, "weights": weights,
            "loglik": loglik}
