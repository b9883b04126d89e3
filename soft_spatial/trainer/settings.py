"""The typed soft settings of a training run, read from ``actor_rollout_ref.rollout.custom`` (one
copy for the rollout servers and the workers). Kept free of verl imports so the entry point can
check them in a second, before Ray starts."""
from __future__ import annotations

from soft_spatial.softthink import (AdaptSoftConfig, AlignmentConfig, DensityConfig, KLConfig,
                                    SoftThinkingConfig, from_mapping)

__all__ = ["soft_settings"]


def soft_settings(custom) -> dict:
    """Typed soft settings from ``rollout.custom`` (missing groups take the paper defaults)."""
    custom = dict(custom or {})
    return {
        "soft": from_mapping(SoftThinkingConfig, custom.get("soft_thinking"),
                             "rollout.custom.soft_thinking"),
        "adaptsoft": from_mapping(AdaptSoftConfig, custom.get("adaptsoft"),
                                  "rollout.custom.adaptsoft"),
        "density": from_mapping(DensityConfig, custom.get("density"), "rollout.custom.density"),
        "alignment": from_mapping(AlignmentConfig, custom.get("alignment"),
                                  "rollout.custom.alignment"),
        "kl": from_mapping(KLConfig, custom.get("kl"), "rollout.custom.kl"),
    }
