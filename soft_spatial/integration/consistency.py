"""Rollout/training consistency: the likelihoods the rollout recorded against the trainer's
recomputation, and the verl settings that would use them (docs/design.md §3).

* :func:`replay_metrics` — ``soft/replay_max_abs_diff`` (every response step), ``_soft`` (soft
  steps), ``_hard`` (discrete steps) and ``_step0`` (each response's first step, the prompt's
  alone): max |rollout log-likelihood − old log-prob|, the old log-prob being the actor's
  replay of the same records under the same density (:class:`~soft_spatial.softthink.DensityConfig`);
* :func:`check_replay` — the run's :class:`~soft_spatial.softthink.ReplayCheckConfig` applied to
  them with the bound of the run's compute dtype (:func:`replay_dtype`): a loud warning, or an
  error that stops the step before its update;
* :func:`check_rollout_correction` — verl's rollout correction (``algorithm.rollout_correction``)
  refused while soft thinking is on, before Ray starts.
"""
from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING

from soft_spatial.softthink import ReplayCheckConfig

if TYPE_CHECKING:  # tensors only in replay_metrics: training's preflight imports this module before torch
    import torch

__all__ = ["replay_metrics", "REPLAY_METRICS", "check_replay", "replay_dtype",
           "check_rollout_correction", "ReplayMismatch", "EXCEEDED"]

#: 1.0 in a step's metrics when a replay difference exceeded the bound (0.0 otherwise)
EXCEEDED = "soft/replay_check_exceeded"
_SETTING = "actor_rollout_ref.rollout.custom.replay_check"


class ReplayMismatch(RuntimeError):
    """The rollout's recorded likelihoods are not the policy's (``replay_check.on_exceed=stop``)."""


#: the metrics :func:`replay_metrics` returns, by the steps they cover
REPLAY_METRICS = {"all": "soft/replay_max_abs_diff", "soft": "soft/replay_max_abs_diff_soft",
                  "hard": "soft/replay_max_abs_diff_hard", "step0": "soft/replay_max_abs_diff_step0"}


def replay_metrics(rollout_log_probs: torch.Tensor, old_log_probs: torch.Tensor,
                   response_mask: torch.Tensor, soft_mask: torch.Tensor) -> dict[str, float]:
    """Max |rollout − replay| over the response steps ``[B, R]``, split by the steps' kind:

    * ``soft/replay_max_abs_diff``: every response step;
    * ``_soft``: the soft steps (``soft_mask``): Gumbel log-densities, which amplify a
      per-candidate log-prob difference Δ_k by the noise (docs/sglang.md, "bf16 and the replay
      check");
    * ``_hard``: the discrete steps: token log-probs, which move by Δ itself;
    * ``_step0``: each response's first step, whose input is the prompt alone (no record fed
      back): a large value there is a prompt, vision or position mismatch, not feedback.

    A part with no step is left out; {} when the batch has no response step.
    """
    mask = response_mask.bool()
    diff = (rollout_log_probs.float() - old_log_probs.float()).abs()
    soft = soft_mask.bool() & mask
    first = mask & (mask.long().cumsum(-1) == 1)
    out = {}
    for part, where in (("all", mask), ("soft", soft), ("hard", mask & ~soft), ("step0", first)):
        if where.any():
            out[REPLAY_METRICS[part]] = float(diff[where].max())
    return out


#: verl's names of a compute dtype → the consistency check's (ReplayCheckConfig.bound_for)
_DTYPES = {"fp32": "float32", "float32": "float32", "bf16": "bfloat16", "bfloat16": "bfloat16",
           "fp16": "float16", "float16": "float16"}


def replay_dtype(config: Mapping) -> str:
    """The lowest precision the rollout's and the actor's likelihoods are computed in, from verl's
    config: ``actor_rollout_ref.rollout.dtype`` (verl's default bfloat16) and the actor's
    ``fsdp_config.mixed_precision.param_dtype`` (verl's default bf16, the compute dtype of its
    autocast): ``float32`` only when both are fp32."""
    aro = config["actor_rollout_ref"]
    rollout = str(aro["rollout"].get("dtype") or "bfloat16")
    mixed = ((aro["actor"].get("fsdp_config") or {}).get("mixed_precision") or {})
    actor = str(mixed.get("param_dtype") or "bf16")
    found = []
    for where, value in (("actor_rollout_ref.rollout.dtype", rollout),
                         ("actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype", actor)):
        if value not in _DTYPES:
            raise ValueError(f"{where}={value!r}: expected one of {sorted(_DTYPES)}")
        found.append(_DTYPES[value])
    if found == ["float32", "float32"]:
        return "float32"
    return "bfloat16" if "bfloat16" in found else "float16"


def check_replay(metrics: Mapping[str, float], check: ReplayCheckConfig, step: int,
                 dtype: str) -> float:
    """Apply the bound of the run's compute ``dtype`` (:func:`replay_dtype`,
    :meth:`~soft_spatial.softthink.ReplayCheckConfig.bound_for`) to ``metrics``
    (:func:`replay_metrics`); returns :data:`EXCEEDED`'s value.

    Over the bound: ``warn`` writes a warning to stderr naming the step, the metric, its value,
    the bound and the setting; ``stop`` raises :class:`ReplayMismatch` with the same words."""
    bound = check.bound_for(dtype)
    over = {k: v for k, v in metrics.items()
            if k.startswith("soft/replay_max_abs_diff") and not v <= bound}
    if not over:
        return 0.0
    worst = max(over, key=lambda k: over[k])
    setting = (f"{_SETTING}.bound" if check.bound is not None else
               f"{_SETTING}.{'fp32' if dtype == 'float32' else 'bf16'}_bound, the {dtype} runs' "
               f"bound")
    message = (f"step {step}: {worst} = {over[worst]:.4g} nats exceeds the bound {bound:g} "
               f"({setting}): the likelihoods the rollout recorded are not the ones the actor "
               f"replays (a rollout/actor density, weight, input or position mismatch, or "
               f"rounding beyond what {dtype} explains; a large "
               f"{REPLAY_METRICS['step0']} points at the prompt; docs/sglang.md, "
               f"\"bf16 and the replay check\")")
    if check.on_exceed == "stop":
        raise ReplayMismatch(f"{message}. Stopped before the update ({_SETTING}.on_exceed=stop); "
                             f"the run resumes from its last checkpoint")
    print(f"WARNING soft_spatial: {message}. Training goes on ({_SETTING}.on_exceed=warn; "
          f"=stop ends the run)", file=sys.stderr, flush=True)
    return 1.0


def check_rollout_correction(algorithm: Mapping | None, soft: bool) -> None:
    """Refuse verl's rollout correction while soft thinking is on (``soft``), naming the setting.

    ``rollout_is`` / ``rollout_rs`` weight or reject tokens by exp(rollout − old log-prob): at soft
    steps these are Gumbel densities, whose ratio is no importance weight under the reference
    density variant, and whose rollout/trainer difference was 17–39 nats in the one GPU run
    (bf16, 2026-11-26: undiagnosed; docs/results/gpu-runs.md). ``bypass_mode`` skips the
    trainer's recomputation, which is where the soft records are attached to the batch and the
    replay is checked."""
    rc = (algorithm or {}).get("rollout_correction") or {}
    if not soft:
        return
    used = [f"algorithm.rollout_correction.{k}={rc.get(k)!r}"
            for k in ("rollout_is", "rollout_rs") if rc.get(k) is not None]
    if rc.get("bypass_mode"):
        used.append("algorithm.rollout_correction.bypass_mode=true")
    if used:
        raise ValueError(f"{', '.join(used)}: verl's rollout correction is not supported with "
                         f"soft thinking: at soft steps its weights would be ratios of Gumbel "
                         f"densities, no importance weights under the reference density variant, "
                         f"and up to exp(±17 to 39) in the one GPU run (bf16, undiagnosed: "
                         f"docs/results/gpu-runs.md); "
                         f"bypass_mode skips the replay the soft records need. Leave it unset, "
                         f"or train with soft_thinking.mode=hard")
