"""Typed settings of the method (docs/design.md §2, §6).

The defaults are the paper's values; ``configs/`` (Hydra) sets every one of them explicitly, and
code receives these dataclasses, never loose dicts. Each ``__post_init__`` validates and raises a
``ValueError`` naming the field.
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, TypeVar
from collections.abc import Mapping

__all__ = [
    "SoftThinkingConfig",
    "SamplingConfig",
    "AdaptSoftConfig",
    "DensityConfig",
    "AlignmentConfig",
    "KLConfig",
    "from_mapping",
    "MODES",
]

MODES = ("hard", "fixed", "adaptsoft")
T = TypeVar("T")


def _check(cond: bool, cls: str, name: str, msg: str) -> None:
    if not cond:
        raise ValueError(f"{cls}.{name}: {msg}")


def _pair(value) -> tuple[float, float] | None:
    if value is None:
        return None
    lo, hi = (float(v) for v in value)
    return (lo, hi)


@dataclass
class SoftThinkingConfig:
    """How the chain of thought is decoded (§2.1–2.3, §2.5 modes).

    mode: ``hard`` (ordinary discrete sampling), ``fixed`` (τ = fixed_tau) or ``adaptsoft``
    (τ from the controller). top_k: K. noise_scale: c (0 → deterministic soft decoding).
    noise_clamp: optional clip of γ (reference-implementation compatibility only).
    think_end: the token that ends the soft phase when the spine emits it.
    """

    mode: str = "adaptsoft"
    top_k: int = 5
    noise_scale: float = 1.0
    fixed_tau: float = 0.5
    noise_clamp: tuple[float, float] | None = None
    think_end: str = "</think>"

    def __post_init__(self):
        n = type(self).__name__
        _check(self.mode in MODES, n, "mode", f"must be one of {MODES}, got {self.mode!r}")
        _check(self.top_k >= 1, n, "top_k", f"must be >= 1, got {self.top_k}")
        _check(self.noise_scale >= 0, n, "noise_scale", f"must be >= 0, got {self.noise_scale}")
        _check(self.fixed_tau > 0, n, "fixed_tau", f"must be > 0, got {self.fixed_tau}")
        self.noise_clamp = _pair(self.noise_clamp)
        if self.noise_clamp is not None:
            _check(self.noise_clamp[0] < self.noise_clamp[1], n, "noise_clamp",
                   f"needs lo < hi, got {self.noise_clamp}")

    @property
    def is_soft(self) -> bool:
        return self.mode != "hard"


@dataclass
class SamplingConfig:
    """Sampling outside the soft mixture: temperature T (training 1.0, evaluation 0.6),
    ``max_new_tokens``, and optional top-k/top-p filters for discrete steps (off by default)."""

    temperature: float = 1.0
    max_new_tokens: int = 2048
    top_k: int = 0
    top_p: float = 1.0
    greedy: bool = False

    def __post_init__(self):
        n = type(self).__name__
        _check(self.temperature > 0, n, "temperature", f"must be > 0, got {self.temperature}")
        _check(self.max_new_tokens >= 1, n, "max_new_tokens",
               f"must be >= 1, got {self.max_new_tokens}")
        _check(self.top_k >= 0, n, "top_k", f"must be >= 0 (0 = off), got {self.top_k}")
        _check(0 < self.top_p <= 1, n, "top_p", f"must be in (0, 1], got {self.top_p}")


@dataclass
class AdaptSoftConfig:
    """The controller (§2.4–2.5). 0 < delta < tau0 is required."""

    proj_dim: int = 8
    width: int = 256
    tau0: float = 0.5
    delta: float = 0.4
    entropy_mean: float = 0.173
    entropy_std: float = 0.224
    use_hidden: bool = True
    use_entropy: bool = True
    seed: int = 0

    def __post_init__(self):
        n = type(self).__name__
        _check(0 < self.delta < self.tau0, n, "delta",
               f"needs 0 < delta < tau0 (tau must stay positive), got delta={self.delta}, "
               f"tau0={self.tau0}")
        _check(self.proj_dim >= 1, n, "proj_dim", f"must be >= 1, got {self.proj_dim}")
        _check(self.width >= 1, n, "width", f"must be >= 1, got {self.width}")
        _check(self.entropy_std >= 0, n, "entropy_std", f"must be >= 0, got {self.entropy_std}")
        _check(self.use_hidden or self.use_entropy, n, "use_hidden",
               "at least one of use_hidden / use_entropy must be true")


@dataclass
class DensityConfig:
    """Soft-step likelihood (§2.6). The non-default values are the SofT-GRPO / reference
    implementation compatibility switches: reduce='mean', clamp=(-1.5, 3), min_logp=-3."""

    reduce: str = "sum"
    clamp: tuple[float, float] | None = None
    min_logp: float | None = None

    def __post_init__(self):
        n = type(self).__name__
        _check(self.reduce in ("sum", "mean"), n, "reduce",
               f"must be 'sum' or 'mean', got {self.reduce!r}")
        self.clamp = _pair(self.clamp)
        if self.clamp is not None:
            _check(self.clamp[0] < self.clamp[1], n, "clamp", f"needs lo < hi, got {self.clamp}")


@dataclass
class KLConfig:
    """What the KL to the frozen reference compares at soft steps (§2.8, :mod:`.kl`).

    over: ``likelihood`` (default, the authors' release: the actor's ``kl_loss_type`` estimator on
    the per-step likelihoods, Gumbel log-densities at soft steps) or ``candidates`` (the exact KL
    between the policies' next-token distributions renormalised over the recorded top-K
    candidates). Discrete steps use the estimator on the sampled token's log-prob in both.
    """

    over: str = "likelihood"

    def __post_init__(self):
        from .kl import KL_OVER
        _check(self.over in KL_OVER, type(self).__name__, "over",
               f"must be one of {KL_OVER}, got {self.over!r}")


@dataclass
class AlignmentConfig:
    """Controller training by gradient alignment (§2.9–2.10).

    enabled=False is the "w/o gradient alignment" ablation (φ gets the GRPO loss's own gradient
    through τ); center=False the "w/o centring" ablation.
    """

    enabled: bool = True
    ref_fraction: float = 0.25
    beta: float = 0.99
    target: float = 1e-3
    max_scale: float = 1e6
    eps: float = 1e-30
    center: bool = True
    lr: float = 1e-3
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    vocab_block: int = 8192

    def __post_init__(self):
        n = type(self).__name__
        _check(0 < self.ref_fraction <= 1, n, "ref_fraction",
               f"must be in (0, 1], got {self.ref_fraction}")
        _check(0 <= self.beta < 1, n, "beta", f"must be in [0, 1), got {self.beta}")
        for name in ("target", "max_scale", "eps", "lr", "grad_clip", "vocab_block"):
            _check(getattr(self, name) > 0, n, name, f"must be > 0, got {getattr(self, name)}")
        _check(self.weight_decay >= 0, n, "weight_decay", f"must be >= 0, got {self.weight_decay}")


def from_mapping(cls: type[T], data: Mapping[str, Any] | None, where: str = "") -> T:
    """Build dataclass ``cls`` from a mapping (e.g. an OmegaConf node), rejecting unknown keys.

    ``where`` names the config location in error messages (e.g. ``"soft_thinking"``).
    """
    data = dict(data or {})
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(data) - known)
    if unknown:
        loc = f" at {where}" if where else ""
        raise ValueError(f"{cls.__name__}{loc}: unknown keys {unknown}; known: {sorted(known)}")
    return cls(**data)
