"""Training AdaptSoft by gradient alignment inside the actor engine (docs/design.md §2.7,
§2.9–2.10).

:class:`AdaptSoftTrainer` owns the controller φ, its AdamW optimizer, the alignment scaler and the
reference-set generator. :class:`~soft_spatial.actor.train_engine.SoftFSDPEngine` calls it at three
points:

1. ``replay_tau`` (in ``prepare_model_inputs`` of a training forward): the straight-through
   τ_upd = τ₀ + Δ tanh(sg(u_roll) + ũ − sg(ũ)), equal to the recorded τ. With alignment on, the
   forward uses a detached *leaf* copy of τ_upd, so the GRPO loss's backward reaches θ but never φ;
   in the ``enabled=False`` ablation the forward uses τ_upd itself, so φ gets the GRPO loss's own
   gradient through τ.
2. ``alignment_step`` (after verl's loss, before its backward), per micro-batch:
   d = sg(∂L_GRPO/∂ℓ) at every response step (autograd.grad w.r.t. the step logits, graph kept);
   v = h, the input of the output layer; reference set R = a random share of the micro-batch's
   sequences, all-gathered across DP ranks (soft steps K-sparse, discrete steps dense);
   O = the soft steps of the other sequences; α via :func:`~soft_spatial.softthink.alignment_scores`;
   κ from :class:`~soft_spatial.softthink.AlignmentScaler`; g_τ = ∂(κ/|O|·L_AS)/∂τ by autograd.grad
   w.r.t. the τ leaf only (θ's ``.grad`` is untouched); centred per rollout; the surrogate
   Σ sg(g̃)·τ_upd is back-propagated into φ only.
3. ``step`` (with every policy optimizer step): φ's gradients are averaged over the DP ranks,
   zeroed if non-finite, clipped, and AdamW steps.

Every rank runs the same collectives and the same backward through the policy (the loss always
depends on every rank's hidden states and τ leaf), which FSDP requires.
"""
from __future__ import annotations

import logging
import pickle
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor

from soft_spatial.actor.replay_layout import ReplayState
from soft_spatial.infra.atomic import atomic_open
from soft_spatial.softthink import (AdaptSoft, AlignmentConfig, AlignmentScaler, SparseGrad,
                                    alignment_loss, alignment_scores, all_gather_rows,
                                    center_per_rollout, controller_surrogate, select_reference,
                                    world_size)

__all__ = ["AdaptSoftTrainer", "read_state", "STATE_KEYS"]

#: what every ``adaptsoft.pt`` holds (`AdaptSoftTrainer.state_dict`)
STATE_KEYS = ("controller_config", "controller", "optimizer", "scaler", "steps")

logger = logging.getLogger(__name__)


def read_state(path) -> dict[str, Any]:
    """The training state an ``adaptsoft.pt`` holds, loaded weights-only (a pickle that would run
    code is refused as ``pickle.UnpicklingError``, none of it run). A file that is not a whole
    checkpoint (truncated by a full disk or a partial copy, another file under that name) is a
    ``ValueError`` naming it: read before a resume starts Ray, and again by the worker."""
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        raise pickle.UnpicklingError(f"{path}: refused: {e}") from e
    except FileNotFoundError:
        raise
    except (RuntimeError, OSError, EOFError, ValueError) as e:
        raise ValueError(f"{path}: not a whole AdaptSoft checkpoint (truncated, or another file "
                         f"under its name): {type(e).__name__}: {str(e)[:200]}") from None
    missing = [k for k in STATE_KEYS if not isinstance(state, dict) or k not in state]
    if missing:
        raise ValueError(f"{path}: not an AdaptSoft checkpoint (no {', '.join(missing)})")
    return state


@dataclass(frozen=True)
class AlignmentTrace:
    """What the last micro-batch's controller update computed (detached), for diagnostics and
    the tests that check each part against an independent computation. Shapes: ``[n]`` per
    replayed step of the micro-batch unless noted."""

    alpha: Tensor  #: α_t of the optimisation steps (§2.9), ``[|O|]``
    g_tau: Tensor  #: ∂(κ/|O|·L_AS)/∂τ per step, before centring (§2.10)
    g_centered: Tensor  #: g_τ centred per rollout over its soft steps (zero off soft steps)
    ref_seq: Tensor  #: the reference set R, ``[num_sequences]`` bool
    seq: Tensor  #: each step's sequence index
    ctrl_x: Tensor  #: the recorded controller features, ``[n, d_p+1]``
    u: Tensor  #: the recorded controller pre-activations
    soft_mask: Tensor  #: which steps are soft
    kappa: float  #: the scale κ used (§2.10)


def _rank(group=None) -> int:
    return dist.get_rank(group) if dist.is_available() and dist.is_initialized() else 0


class AdaptSoftTrainer:
    """The controller's optimisation state and update rule (module docstring).

    Args:
        controller: the AdaptSoft module (moved to ``device``, fp32, replicated on every rank).
        config: :class:`AlignmentConfig` (``enabled=False``: the no-alignment ablation).
        seed: seeds the reference-set generator (offset by the rank).
    """

    def __init__(self, controller: AdaptSoft, config: AlignmentConfig | None = None,
                 seed: int = 0, device=None):
        self.config = config or AlignmentConfig()
        # device 0 is cuda:0, not "no device": only None means the CPU
        self.controller = controller.to("cpu" if device is None else device).float().train()
        params = [p for p in self.controller.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(params, lr=self.config.lr,
                                           weight_decay=self.config.weight_decay)
        self.scaler = AlignmentScaler(self.config)
        self.seed = seed
        self.generator = torch.Generator().manual_seed(seed * 1_000_003 + _rank())
        # every DP rank's generator state at the last optimizer step (world > 1), so rank 0's
        # checkpoint carries each rank's stream
        self._rank_generators: list[Tensor] | None = None
        self.steps = 0
        self.last: AlignmentTrace | None = None  # the last micro-batch's update, detached

    @property
    def needs_loss_hook(self) -> bool:
        """Whether the engine must call :meth:`alignment_step` after each training loss."""
        return self.config.enabled

    # -- 1. replay ---------------------------------------------------------------------------
    def replay_tau(self, ctrl_x: Tensor, u: Tensor, soft_mask: Tensor, tau_record: Tensor):
        """(τ for the forward, τ_upd with its graph to φ, the τ leaf or None), all ``[n]``."""
        tau_upd = self.controller.replay_temperature(ctrl_x, u)
        tau_upd = torch.where(soft_mask, tau_upd, tau_record.to(tau_upd.dtype))
        if self.config.enabled:
            leaf = tau_upd.detach().requires_grad_(True)
            return leaf, tau_upd, leaf
        return tau_upd, tau_upd, None

    # -- 2. alignment ------------------------------------------------------------------------
    def alignment_step(self, loss: Tensor, state: ReplayState, group=None) -> dict[str, float]:
        """One micro-batch of the controller update; accumulates into φ's ``.grad``."""
        cfg = self.config
        sb = state.batch
        lik, hidden, leaf, tau_upd = state.likelihood, state.hidden_steps, state.tau_leaf, state.tau_upd
        if lik is None or hidden is None:
            raise ValueError("alignment_step needs the forward's likelihoods and hidden states "
                             "(ReplayState.likelihood, .hidden_steps): the model has not run")
        # d_t = ∂L/∂ℓ_t: K-sparse at soft steps (their candidate logits), dense at discrete ones
        d_cand, d_disc = torch.autograd.grad(loss, [lik.cand_logits, lik.disc_logits],
                                             retain_graph=True, allow_unused=True)
        d_cand = (torch.zeros_like(lik.cand_logits, dtype=torch.float32) if d_cand is None
                  else d_cand.detach().float())
        d_disc = (torch.zeros_like(lik.disc_logits, dtype=torch.float32) if d_disc is None
                  else d_disc.detach().float())
        soft_mask = sb.soft_mask
        n = soft_mask.shape[0]
        dev = soft_mask.device
        slot = torch.zeros(n, dtype=torch.long, device=dev)  # row of step t in its part
        slot[lik.soft_rows] = torch.arange(lik.soft_rows.numel(), device=dev)
        slot[lik.disc_rows] = torch.arange(lik.disc_rows.numel(), device=dev)
        ref_seq = select_reference(sb.num_sequences, cfg.ref_fraction, self.generator)
        in_ref = ref_seq.to(dev)[sb.seq]
        ref_s, ref_d, opt = in_ref & soft_mask, in_ref & ~soft_mask, ~in_ref & soft_mask
        hv = hidden.detach().float()
        parts = [sb.topk_ids[ref_s], d_cand[slot[ref_s]], hv[ref_s], d_disc[slot[ref_d]], hv[ref_d]]
        ids_rs, vals_rs, v_rs, d_rd, v_rd = (all_gather_rows(p, group) for p in parts)
        alpha = alignment_scores(SparseGrad(sb.topk_ids[opt], d_cand[slot[opt]]), hidden[opt],
                                 [SparseGrad(ids_rs, vals_rs), d_rd], [v_rs, v_rd],
                                 vocab_block=cfg.vocab_block)
        kappa = self.scaler.update(alpha, group)
        # "+ 0·Σh + 0·Σℓ": the backward runs through the whole policy on every rank, even with
        # O = ∅, and it enters through the model's output (ℓ), so FSDP2's root pre-backward runs
        # before any unit's post-backward (starting from h alone crashes under FSDP2)
        l_as = (alignment_loss(alpha, kappa) + 0.0 * hidden.sum() + 0.0 * lik.cand_logits.sum()
                + 0.0 * lik.disc_logits.sum())
        (g,) = torch.autograd.grad(l_as, leaf, retain_graph=True, allow_unused=True)
        g = torch.zeros_like(leaf) if g is None else g.detach()
        g_u = g.to(tau_upd.dtype)
        if cfg.center:
            g_c = center_per_rollout(g_u, sb.seq, soft_mask)
        else:
            g_c = torch.where(soft_mask, g_u, torch.zeros_like(g_u))
        controller_surrogate(g_c, tau_upd).backward()
        self.last = AlignmentTrace(alpha=alpha.detach(), g_tau=g, g_centered=g_c.detach(),
                                   ref_seq=ref_seq, seq=sb.seq, ctrl_x=sb.ctrl_x.detach(),
                                   u=sb.u.detach(), soft_mask=soft_mask, kappa=float(kappa))
        n_opt = int(opt.sum())
        return {"adaptsoft/alpha_rms": alpha.detach().pow(2).mean().sqrt().item() if n_opt else 0.0,
                "adaptsoft/kappa": float(kappa), "adaptsoft/num_opt_steps": float(n_opt),
                "adaptsoft/tau_mean": tau_upd[soft_mask].mean().item() if soft_mask.any() else 0.0}

    # -- 3. optimizer ------------------------------------------------------------------------
    def zero_grad(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)

    def step(self, group=None) -> dict[str, float]:
        """Average φ's gradients over ranks, drop non-finite ones, clip, AdamW step."""
        params = [p for g in self.optimizer.param_groups for p in g["params"]]
        flat = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1)
                          for p in params])
        world = world_size(group)
        if world > 1:
            dist.all_reduce(flat, group=group)
            flat /= world
        finite = bool(torch.isfinite(flat).all())
        if not finite:
            flat.zero_()
        offset = 0
        for p in params:
            n = p.numel()
            p.grad = flat[offset:offset + n].view_as(p).clone()
            offset += n
        norm = torch.nn.utils.clip_grad_norm_(params, self.config.grad_clip)
        self.optimizer.step()
        self.steps += 1
        if world_size() > 1:  # rank 0 alone writes the checkpoint: it keeps every rank's stream
            mine = self.generator.get_state().to(flat.device)  # (all ranks, not only this DP group)
            states = [torch.empty_like(mine) for _ in range(world_size())]
            dist.all_gather(states, mine)
            self._rank_generators = [s.cpu() for s in states]
        return {"adaptsoft/grad_norm": float(norm), "adaptsoft/grad_finite": float(finite),
                "adaptsoft/kappa": float(self.scaler.scale),
                "adaptsoft/ema_rms": float(self.scaler.m or 0.0),
                "adaptsoft/optimizer_steps": float(self.steps)}

    # -- checkpoint --------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {"controller_config": self.controller.config_dict(),
                "controller": self.controller.state_dict(),  # projection P included (a buffer)
                "optimizer": self.optimizer.state_dict(), "scaler": self.scaler.state_dict(),
                "alignment": dict(vars(self.config)), "steps": self.steps, "seed": self.seed,
                **self._generator_state()}

    def _generator_state(self) -> dict[str, Any]:
        """The reference-set generators' states by rank (uint8 tensors), those this rank knows:
        its own always; every rank's when the states gathered at the last optimizer step are
        current (no reference set drawn since: all ranks draw in lockstep, so this rank's own
        state tells)."""
        rank, world = _rank(), world_size()
        mine = self.generator.get_state()
        states = {rank: mine}
        gathered = self._rank_generators
        if (world > 1 and gathered is not None and len(gathered) == world
                and torch.equal(gathered[rank], mine)):
            states = dict(enumerate(gathered))
        return {"generator_states": states, "generator_world": world}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        # the seed only sets the initial weights and P, which the state dict restores
        mine = {k: v for k, v in self.controller.config_dict().items() if k != "seed"}
        theirs = {k: v for k, v in state["controller_config"].items() if k != "seed"}
        if mine != theirs:
            raise ValueError(f"AdaptSoft checkpoint was written for {state['controller_config']}, "
                             f"this controller is {self.controller.config_dict()}")
        self.controller.load_state_dict(state["controller"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scaler.load_state_dict(state["scaler"])
        self.steps = int(state["steps"])
        # each rank draws its own reference sets: continue its stream where the checkpoint left it
        rank, world = _rank(), world_size()
        states = state.get("generator_states") or {}
        if state.get("generator_world") == world and rank in states:
            self.generator.set_state(states[rank].to("cpu", torch.uint8))
        else:  # a checkpoint from before the state was saved, or from another number of ranks
            logger.warning("AdaptSoft checkpoint (step %d) has no reference-set generator state for "
                           "rank %d of %d (written %s): reseeding it from (seed, rank, steps), so "
                           "the reference sets from here on differ from an uninterrupted run's",
                           self.steps, rank, world,
                           "without one" if "generator_states" not in state
                           else f"by {state.get('generator_world')} ranks")
            self.generator.manual_seed(self.seed * 1_000_003 + rank + 7919 * self.steps)

    def save(self, path) -> None:
        """Write the state (atomically: a crash never leaves a truncated ``adaptsoft.pt``)."""
        with atomic_open(path, "wb") as f:
            torch.save(self.state_dict(), f)

    def load(self, path: str | Path) -> None:
        self.load_state_dict(read_state(path))
