"""One decoding step for a batch of rows: the soft/discrete sampler shared by every engine.

The embedded engine and the SGLang sampler call :func:`sample_step` with the same inputs (last
logits, last hidden states, one block of K+1 uniforms per row, a function of the row's seed
and step (:func:`~soft_spatial.softthink.noise.noise_uniforms`), which rows are still thinking) and
therefore produce identical records (docs/design.md §2.1–2.5, §3). Records are fp32 and the
next-step mixture is built from the rounded record itself, so a replay from the trace reproduces
the numbers exactly whatever the model's dtype.
"""
from __future__ import annotations

from dataclasses import fields

import torch
from torch import Tensor, nn

from soft_spatial.softthink import (AdaptSoft, DensityConfig, SamplingConfig, SoftThinkingConfig,
                                    StepRecord, gumbel_from_uniform, gumbel_log_density,
                                    mixture_weights, normalized_entropy, soft_step)

__all__ = ["sample_step", "discrete_sample"]

_EXACT = DensityConfig()  # eq. 5 itself, the default (built once: the sampler is a hot path)


def sample_step(logits: Tensor, h: Tensor | None, u: Tensor, thinking: Tensor,
                soft_thinking: SoftThinkingConfig, sampling: SamplingConfig,
                controller: AdaptSoft | None, feature_dim: int,
                debug: bool = False, density: DensityConfig | None = None,
                own_path: bool | None = None) -> StepRecord:
    """The step's records of ``b`` live rows (:class:`~soft_spatial.softthink.StepRecord`).

    Args:
        logits: ``[b, V]`` last-position logits (never-emittable ids already at -inf).
        h: ``[b, D]`` the final hidden states that produced them (AdaptSoft's input; None
            without a controller).
        u: ``[b, K+1]`` uniforms in [0, 1): the first K perturb soft rows, the last samples
            discrete rows.
        thinking: ``[b]`` bool, rows whose spine has not emitted the think-end token yet.
        density: the soft-step likelihood the run trains with (eq. 5 and its compatibility
            variants, ``SoftSettings.density``; None: the exact density). ``loglik`` records the
            soft steps under it, the same function and settings the actor replays with
            (:func:`~soft_spatial.softthink.step_likelihood`), so rollout and replay agree.
        own_path: each row computes only its own path (soft or discrete), selected on the host;
            else every row computes both and selects on the device, with no host read and no
            branch on values (what an accelerator needs, and what a CUDA graph captures).
            None: on the CPU only. Both give the same records.
    Returns:
        the record fields, ``loglik`` (the step's likelihood under the rollout policy) and, with
        ``debug``, ``weights`` and ``logp``.
    """
    temperature = sampling.temperature
    b, k = logits.shape[0], soft_thinking.top_k
    soft = thinking.bool() & soft_thinking.is_soft
    if own_path if own_path is not None else logits.device.type == "cpu":
        return _own_paths(logits, h, u, soft, soft_thinking, sampling, controller, feature_dim,
                          debug, density)
    # On an accelerator every row takes the same ops, soft and discrete alike, and the rows'
    # choice is a select: no branch on values and no host read, so the step never waits for the
    # device (SGLang launches its next batch meanwhile) and can be captured as a graph. Each
    # field is made once, by its select (no zero step filled in).
    tok, lp = discrete_sample(logits, u[:, k], sampling, temperature)
    ids = nn.functional.pad(tok[:, None], (0, k - 1))  # a discrete record: [token, 0, ...]
    if not soft_thinking.is_soft:
        zero, zeros = lp.new_zeros(b), lp.new_zeros(b, k)
        return StepRecord(topk_ids=ids, scores=zeros, tau=zero, u=zero,
                          ctrl_x=lp.new_zeros(b, feature_dim), entropy=zero, soft=soft,
                          loglik=lp.float(), weights=zeros if debug else None,
                          logp=zeros if debug else None)
    part = _soft_records(logits, h, u[:, :k], soft_thinking, temperature, controller, density,
                         debug)
    col = soft[:, None]
    return StepRecord(
        topk_ids=torch.where(col, part.topk_ids, ids),
        scores=torch.where(col, part.scores, 0.0), tau=torch.where(soft, part.tau, 0.0),
        u=torch.where(soft, part.u, 0.0) if part.u is not None else lp.new_zeros(b),
        ctrl_x=(torch.where(col, part.ctrl_x, 0.0) if part.ctrl_x is not None
                else lp.new_zeros(b, feature_dim)),
        entropy=torch.where(soft, part.entropy, 0.0), soft=soft,
        loglik=torch.where(soft, part.loglik, lp.float()),
        weights=torch.where(col, part.weights, 0.0) if debug else None,
        logp=torch.where(col, part.logp, 0.0) if debug else None)


def _own_paths(logits: Tensor, h: Tensor | None, u: Tensor, soft: Tensor,
               soft_thinking: SoftThinkingConfig, sampling: SamplingConfig,
               controller: AdaptSoft | None, feature_dim: int, debug: bool,
               density: DensityConfig | None) -> StepRecord:
    """:func:`sample_step` with each row on its own path only (the CPU's way: reading the soft
    mask there costs nothing, and the full-vocabulary discrete draw alone was two thirds of a
    soft step's sampler time). A row's records are those of the select path: the same functions
    on its own values."""
    b, k = logits.shape[0], soft_thinking.top_k
    rec = StepRecord.zeros(b, k, feature_dim, logits.device, debug)
    rec.soft = soft.clone()
    disc_rows, soft_rows = (~soft).nonzero().squeeze(-1), soft.nonzero().squeeze(-1)

    def rows(t: Tensor | None, idx: Tensor) -> Tensor | None:  # no [b, V] copy when all go one way
        return t if t is None or idx.numel() == b else t[idx]

    if disc_rows.numel():
        tok, lp = discrete_sample(rows(logits, disc_rows), u[disc_rows, k], sampling,
                                  sampling.temperature)
        rec.topk_ids[disc_rows, 0] = tok
        rec.loglik[disc_rows] = lp.float()
    if soft_rows.numel():
        part = _soft_records(rows(logits, soft_rows), rows(h, soft_rows), u[soft_rows, :k],
                             soft_thinking, sampling.temperature, controller, density, debug)
        for f in fields(part):
            value = getattr(part, f.name)
            if value is not None and f.name != "soft":
                mine = getattr(rec, f.name)
                mine[soft_rows] = value.to(mine.dtype)
    return rec


def _soft_records(logits: Tensor, h: Tensor | None, u: Tensor,
                  soft_thinking: SoftThinkingConfig, temperature: float,
                  controller: AdaptSoft | None, density: DensityConfig | None,
                  debug: bool) -> StepRecord:
    """The soft step's records ``[n, ...]`` of ``n`` rows, all taken as soft (§2.1-2.6): top-K
    candidates, perturbed scores (``u`` ``[n, K]``), τ (fixed or AdaptSoft's), the controller's
    input, the normalised entropy (once: the controller's feature is the same Ĥ) and the step's
    likelihood under ``density``. Fields the step does not make (``u`` and ``ctrl_x`` without a
    controller, ``soft``) are None."""
    k, n = soft_thinking.top_k, logits.shape[0]
    # Records are fp32 and the mixture is built from the rounded record itself, so a replay
    # from the trace reproduces these numbers exactly whatever the model's dtype.
    noise = gumbel_from_uniform(u, soft_thinking.noise_clamp)
    ids, z, logp = soft_step(logits.float(), k, temperature, soft_thinking.noise_scale, noise)
    entropy = normalized_entropy(logp)
    x = uu = None
    if controller is not None:
        x = controller.features(h.float(), logp, entropy)
    if soft_thinking.mode == "adaptsoft":
        uu = controller(x)
        tau = controller.temperature(uu)
    else:
        tau = torch.full((n,), soft_thinking.fixed_tau, device=logits.device)
    c = soft_thinking.noise_scale  # without noise a soft step has no density: 0
    d = density or _EXACT
    loglik = (gumbel_log_density(z, logp, c, d.reduce, d.clamp, d.min_logp) if c > 0
              else torch.zeros(n, device=logits.device))
    return StepRecord(topk_ids=ids, scores=z, tau=tau, u=uu, ctrl_x=x, entropy=entropy,
                      soft=None, loglik=loglik,
                      weights=mixture_weights(z, tau) if debug else None,
                      logp=logp if debug else None)


def discrete_sample(logits, u, sampling: SamplingConfig, temperature: float):
    """Sampled token and its log-probability under softmax(ℓ/T) (unfiltered, as scored at
    training time)."""
    scaled = logits.float() / temperature
    full = torch.log_softmax(scaled, -1)
    if sampling.greedy:
        tok = logits.argmax(-1)
        return tok, full.gather(-1, tok[:, None]).squeeze(-1)
    if sampling.top_k > 0:
        kth = torch.topk(scaled, min(sampling.top_k, scaled.shape[-1]), -1).values[:, -1:]
        scaled = scaled.masked_fill(scaled < kth, float("-inf"))
    probs = torch.softmax(scaled, -1)
    if sampling.top_p < 1.0:
        sp, order = probs.sort(-1, descending=True)
        drop = sp.cumsum(-1) - sp > sampling.top_p
        sp = sp.masked_fill(drop, 0)
        probs = torch.zeros_like(probs).scatter_(-1, order, sp)
        probs = probs / probs.sum(-1, keepdim=True)
    cdf = probs.cumsum(-1)
    target = u.float()[:, None] * cdf[:, -1:]
    tok = torch.searchsorted(cdf, target, right=True).clamp(max=logits.shape[-1] - 1)
    return tok.squeeze(-1), full.gather(-1, tok).squeeze(-1)
