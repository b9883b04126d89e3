"""What an SGLang server with soft decoding is started with: the run's settings for its scheduler
processes and the server arguments soft decoding requires.

The verl server actor (and :class:`~soft_spatial.engines.sglang.engine.SGLangEngine`) wraps the
run's :class:`~soft_spatial.softthink.settings.SoftSettings` with what it derives from the model in
a :class:`SchedulerSetup`, stores it as JSON in the environment variable :data:`ENV_VAR` before
SGLang spawns its scheduler processes (they inherit the environment), and every scheduler process
reads it back in :func:`soft_spatial.engines.sglang.hooks.install`. No sglang import here.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

from soft_spatial.softthink import check_field_types
from soft_spatial.softthink.settings import SoftSettings

__all__ = ["SchedulerSetup", "ENV_VAR", "required_server_args", "CONTROLLER_LOADER",
           "SAMPLER_BACKEND", "REFUSED", "FP32_LM_HEAD"]

ENV_VAR = "SOFT_SPATIAL_SGLANG_SETTINGS"
CONTROLLER_LOADER = "soft_spatial.engines.sglang.hooks.load_weights"
SAMPLER_BACKEND = "soft_gumbel"  # the sampling backend hooks.install registers


@dataclass
class SchedulerSetup:
    """What every scheduler process needs to decode softly: the run's settings, unchanged, and
    what the server derives from the model and the command.

    soft: the run's :class:`SoftSettings` (mode, K, controller shape, noise base seed, ...).
    hidden_size: the policy's final hidden size (AdaptSoft's input).
    think_end_id: id of ``soft.soft_thinking.think_end`` (None in hard mode).
    banned_ids: ids never sampled (:func:`soft_spatial.models.tokens.unusable_token_ids`, as the
        local engine masks them).
    controller_path: an AdaptSoft checkpoint every scheduler process loads at start (evaluation;
        training sends the weights through the custom weight loader instead).
    """

    soft: SoftSettings
    hidden_size: int
    think_end_id: int | None = None
    banned_ids: list[int] = field(default_factory=list)
    controller_path: str | None = None

    def __post_init__(self):
        check_field_types(self)
        if self.soft.soft_thinking.is_soft and self.think_end_id is None:
            raise ValueError(f"SchedulerSetup: mode {self.soft.soft_thinking.mode!r} needs "
                             f"think_end_id")
        if self.hidden_size <= 0:
            raise ValueError(f"SchedulerSetup.hidden_size must be > 0, got {self.hidden_size}")

    def to_json(self) -> str:
        return json.dumps({"soft": self.soft.to_dict(), "hidden_size": self.hidden_size,
                           "think_end_id": self.think_end_id, "banned_ids": list(self.banned_ids),
                           "controller_path": self.controller_path})

    @classmethod
    def from_json(cls, text: str) -> "SchedulerSetup":
        d = json.loads(text)
        return cls(soft=SoftSettings.from_dict(d.pop("soft"), where=f"${ENV_VAR}.soft"), **d)

    def export(self) -> None:
        """Make the setup visible to processes spawned from now on."""
        os.environ[ENV_VAR] = self.to_json()

    @classmethod
    def from_env(cls) -> "SchedulerSetup":
        text = os.environ.get(ENV_VAR)
        if not text:
            raise RuntimeError(f"soft_spatial SGLang plugin: ${ENV_VAR} is not set; the verl "
                               f"server (rollout.name=sglang_soft) sets it before launching "
                               f"SGLang")
        return cls.from_json(text)


# Server arguments soft decoding needs (see the module docstring of hooks.py for why). The
# radix cache stays on: soft requests share their prompt's KV, and their KV from the first soft
# input on is never inserted (soft_spatial.compat.sglang.protect_soft_kv).
_REQUIRED = {
    "enable_mixed_chunk": False,  # decode rows must be pure decode batches to get mixtures
}
#: SGLang 0.5.12's server argument that computes the output head's product in fp32
#: (``layers/logits_processor.py`` ``LogitsProcessor._compute_lm_head``): the rollout's side of
#: ``DensityConfig.fp32_logits``
FP32_LM_HEAD = "enable_fp32_lm_head"

# Server arguments soft decoding refuses when true, and why (required_server_args raises naming
# the setting; hooks.check_server_args checks SGLang's final arguments again).
REFUSED = {
    "enable_dp_attention": "data-parallel attention is not supported",
    "speculative_algorithm": "speculative decoding is not supported (the sampler draws one "
                             "token per step)",
    # the last two make SGLang reset sampling_backend to "pytorch" (no soft records)
    "enable_deterministic_inference": "deterministic inference makes SGLang sample with its "
                                      "pytorch backend instead of the soft one",
    "rl_on_policy_target": "it makes SGLang sample with its pytorch backend instead of the soft "
                           "one",
    # sglang 0.5.12: the graph runner then captures, and recaptures, with every position's hidden
    # states (CaptureHiddenMode.FULL); a plugin decode batch asks for the last one (LAST, AdaptSoft's
    # input) and CudaGraphRunner.can_run accepts only NULL or the captured mode
    "enable_return_hidden_states": "SGLang then holds its CUDA graphs at every position's hidden "
                                   "states (FULL) and refuses every soft decode batch, which asks "
                                   "for the last one: every decode step would run eagerly, at "
                                   "graphs-off speed",
}
# Defaults that the user may change. Overlap scheduling is exact where SGLang gives both sides the
# same batches (docs/sglang.md, "Overlap scheduling"); off until a GPU run measures it (stage f).
_DEFAULTS = {
    "disable_overlap_schedule": True,
}


def required_server_args(engine_kwargs: dict[str, Any] | None,
                         fp32_logits: bool = False) -> dict[str, Any]:
    """``rollout.engine_kwargs.sglang`` with what the soft backend needs set.

    Sets ``sampling_backend`` and the custom weight loader (controller sync), and the flags
    above; a user value that contradicts one of them raises instead of being overridden silently.
    ``enable_fp32_lm_head`` follows the soft settings' ``density.fp32_logits`` (``fp32_logits``),
    the one setting for the rollout's logits and the trainer's.
    Overlap scheduling stays off unless ``disable_overlap_schedule=False`` is given.
    CUDA graphs are left to the caller (on by default; ``disable_cuda_graph=True`` turns them off
    for comparisons: the soft decode read runs inside SGLang's captured forward either way).
    """
    out = dict(engine_kwargs or {})
    given = out.get(FP32_LM_HEAD)
    if given is not None and bool(given) != fp32_logits:
        raise ValueError(f"engine_kwargs.sglang.{FP32_LM_HEAD}={given!r} contradicts the soft "
                         f"settings' density.fp32_logits={fp32_logits}: one setting computes the "
                         f"rollout's logits and the trainer's in fp32 (set density.fp32_logits, "
                         f"and leave {FP32_LM_HEAD} unset)")
    out[FP32_LM_HEAD] = fp32_logits
    for key, value in _REQUIRED.items():
        if key in out and out[key] is not None and bool(out[key]) != value:
            raise ValueError(f"rollout.name=sglang_soft needs engine_kwargs.sglang.{key}="
                             f"{value} (got {out[key]!r}); see soft_spatial/engines/sglang")
        out[key] = value
    backend = out.get("sampling_backend")
    if backend not in (None, SAMPLER_BACKEND):
        raise ValueError(f"rollout.name=sglang_soft samples with its own backend; remove "
                         f"engine_kwargs.sglang.sampling_backend={backend!r}")
    out["sampling_backend"] = SAMPLER_BACKEND
    for key, value in _DEFAULTS.items():
        if out.get(key) is None:
            out[key] = value
    # The n samples of a prompt arrive together. SGLang's default "fcfs" prefills them in one
    # batch, each from scratch; "lpm" (cache-aware) schedules one first and lets the others
    # match its prompt in the radix cache (prompts of more than 32 tokens).
    out.setdefault("schedule_policy", "lpm")
    for key, why in REFUSED.items():
        if out.get(key):
            raise ValueError(f"rollout.name=sglang_soft does not support {key}={out[key]!r} "
                             f"(engine_kwargs.sglang.{key}): {why}")
    loaders = list(out.get("custom_weight_loader") or [])
    if CONTROLLER_LOADER not in loaders:
        loaders.append(CONTROLLER_LOADER)
    out["custom_weight_loader"] = loaders
    return out
