"""Typed settings of the method (docs/design.md §2, §6).

Every default of a method hyperparameter is written once, here, with its explanation beside it
(the docstring under each field); it is the paper's value. ``configs/soft/paper.yaml`` spells the
same values out for Hydra (``tests/softthink/test_config.py`` fails when the two differ, and when
a literal default of one of these settings appears anywhere else in ``soft_spatial/``). Code
receives these dataclasses, never loose dicts: ``AdaptSoft``, ``AlignmentScaler`` and the soft
training engine take their config object rather than re-declaring its defaults, and the
dataclasses alone validate. Each ``__post_init__`` first checks every field's type against its
annotation (`check_field_types`: ``temperature=abc`` is an error naming ``temperature``, not a
``TypeError`` from a comparison), then validates, and raises a ``ValueError`` naming the field.
"""
from __future__ import annotations

import dataclasses
import functools
import numbers
import types
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, TypeVar

__all__ = [
    "TAU0",
    "SoftThinkingConfig",
    "SamplingConfig",
    "AdaptSoftConfig",
    "DensityConfig",
    "AlignmentConfig",
    "KLConfig",
    "from_mapping",
    "check_field_types",
    "MODES",
]

MODES = ("hard", "fixed", "adaptsoft")
#: the readings of the KL at soft steps (:mod:`soft_spatial.softthink.kl`, §2.8)
KL_OVER = ("likelihood", "candidates")
T = TypeVar("T")


@functools.cache
def _hints(cls: type) -> dict:
    return typing.get_type_hints(cls)


def _typed(value, hint, where: str):
    """``value`` checked against the annotation ``hint`` (an int is accepted, as a float, for a
    float; a list or tuple for a tuple); raises ValueError naming ``where``."""
    if hint is Any:
        return value
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        options = [a for a in args if a is not type(None)]
        for option in options:
            try:
                return _typed(value, option, where)
            except ValueError:
                continue
        if len(options) == 1:
            return _typed(value, options[0], where)  # its own message
        raise ValueError(f"{where}: expected {hint}, got {value!r}")
    expected = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}
    ok = {bool: lambda v: isinstance(v, bool),
          int: lambda v: isinstance(v, numbers.Integral) and not isinstance(v, bool),
          float: lambda v: isinstance(v, numbers.Real) and not isinstance(v, bool),
          str: lambda v: isinstance(v, str)}
    if hint in ok:
        if not ok[hint](value):
            raise ValueError(f"{where}: expected {expected[hint]}, got {value!r}")
        return float(value) if hint is float else value
    if origin in (list, tuple):
        if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
            raise ValueError(f"{where}: expected a list, got {value!r}")
        if origin is tuple and args and args[-1] is not Ellipsis and len(args) != len(value):
            raise ValueError(f"{where}: expected {len(args)} values, got {value!r}")
        inner = args[:1] * len(value) if origin is list or args[-1:] == (Ellipsis,) else args
        items = [_typed(v, h, f"{where}[{i}]") for i, (v, h) in enumerate(zip(value, inner))]
        return origin(items) if inner else value
    if origin is dict or hint is dict:
        if not isinstance(value, Mapping):
            raise ValueError(f"{where}: expected a mapping, got {value!r}")
        return value
    if dataclasses.is_dataclass(hint) and not isinstance(value, hint):
        raise ValueError(f"{where}: expected {hint.__name__} settings, got {value!r}")
    return value


def check_field_types(obj) -> None:
    """Check every field of the dataclass instance ``obj`` against its annotation, in place (a
    float field given an int holds the float); the first mismatch raises a ValueError naming
    ``<Class>.<field>``. Called first in every settings class's ``__post_init__``."""
    hints = _hints(type(obj))
    for f in fields(obj):
        value = getattr(obj, f.name)
        typed = _typed(value, hints[f.name], f"{type(obj).__name__}.{f.name}")
        if typed is not value:
            object.__setattr__(obj, f.name, typed)


def _check(cond: bool, cls: str, name: str, msg: str) -> None:
    if not cond:
        raise ValueError(f"{cls}.{name}: {msg}")


def _pair(value) -> tuple[float, float] | None:
    if value is None:
        return None
    lo, hi = (float(v) for v in value)
    return (lo, hi)


#: τ₀, the paper's: the centre of AdaptSoft's τ (:attr:`AdaptSoftConfig.tau0`) and the fixed-soft
#: baseline's τ (:attr:`SoftThinkingConfig.fixed_tau`), one number for both defaults
TAU0 = 0.5


@dataclass
class SoftThinkingConfig:
    """How the chain of thought is decoded (§2.1–2.3, §2.5 modes): ``hard`` (ordinary discrete
    sampling), ``fixed`` (τ = fixed_tau) or ``adaptsoft`` (τ from the controller)."""

    mode: str = "adaptsoft"
    """``hard`` | ``fixed`` | ``adaptsoft`` (§2.5)."""
    top_k: int = 5
    """K, the candidates of the mixture at each soft step (§2.1; Table 5). ``top_k`` means K
    everywhere; discrete sampling's top-k filter is ``sample_top_k`` (evaluation) /
    :attr:`SamplingConfig.top_k` (verl's sampling parameter)."""
    noise_scale: float = 1.0
    """c, the Gumbel noise scale (§2.2); 0 gives deterministic soft decoding."""
    fixed_tau: float = TAU0
    """τ in ``fixed`` mode: the paper's fixed-soft baseline at τ₀ (:data:`TAU0`, the controller's
    default centre; set either and the other keeps its own)."""
    noise_clamp: tuple[float, float] | None = None
    """Optional clip of γ; ``[-1.5, 3.0]`` reproduces the authors' sampler (compatibility only)."""
    think_end: str = "</think>"
    """The token that ends the soft phase when the spine emits it."""

    def __post_init__(self):
        check_field_types(self)
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
    """T of the candidate distribution and of discrete steps (training 1.0, evaluation 0.6)."""
    max_new_tokens: int = 2048
    """Response length bound (training's ``max_response_length``)."""
    top_k: int = 0
    """Discrete steps' top-k filter, verl's sampling parameter (0 = off; evaluation's
    ``sample_top_k``). Not K: that is :attr:`SoftThinkingConfig.top_k`."""
    top_p: float = 1.0
    """Discrete steps' nucleus filter (1 = off)."""
    greedy: bool = False
    """Argmax at discrete steps (verl's temperature 0)."""

    def __post_init__(self):
        check_field_types(self)
        n = type(self).__name__
        _check(self.temperature > 0, n, "temperature", f"must be > 0, got {self.temperature}")
        _check(self.max_new_tokens >= 1, n, "max_new_tokens",
               f"must be >= 1, got {self.max_new_tokens}")
        _check(self.top_k >= 0, n, "top_k", f"must be >= 0 (0 = off), got {self.top_k}")
        _check(0 < self.top_p <= 1, n, "top_p", f"must be in (0, 1], got {self.top_p}")


@dataclass
class AdaptSoftConfig:
    """The controller (§2.4–2.5). 0 < delta < tau0 is required; validated here only (AdaptSoft
    builds from this object)."""

    proj_dim: int = 8
    """d_p, rows of the fixed random projection P of LN(h)."""
    width: int = 256
    """Hidden width of the MLP."""
    tau0: float = TAU0
    """τ₀, the centre of τ = τ₀ + Δ·tanh(u) and τ at initialisation (:data:`TAU0`: also the
    fixed mode's default τ)."""
    delta: float = 0.4
    """Δ, the half-width of τ's range; 0 < Δ < τ₀ keeps τ positive."""
    entropy_mean: float = 0.173
    """μ_H of Ĥ_s = (Ĥ − μ_H)/(σ_H + ε_H): the authors' value for Qwen3-VL-8B-Thinking
    (another backbone: ``python -m soft_spatial.stats entropy``, then ``entropy=<name>``)."""
    entropy_std: float = 0.224
    """σ_H of the same standardisation (the authors' value)."""
    use_hidden: bool = True
    """The MLP reads P·LN(h) (``false``: the no_hidden ablation)."""
    use_entropy: bool = True
    """The MLP reads Ĥ_s (``false``: the no_entropy ablation)."""
    seed: int = 0
    """Seed of P and of the MLP's first layer."""

    def __post_init__(self):
        check_field_types(self)
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
    """Soft-step likelihood (§2.6), and the precision of the logits every per-step likelihood is
    computed from, on the rollout's side and the trainer's. The non-default values of the first
    three are the SofT-GRPO / reference implementation compatibility switches: reduce='mean',
    clamp=(-1.5, 3), min_logp=-3."""

    reduce: str = "sum"
    """``sum`` over the K slots: eq. 5, a normalised density (``mean``: compatibility)."""
    clamp: tuple[float, float] | None = None
    """Clip of γ̃ (compatibility: ``[-1.5, 3.0]``); None: no clip."""
    min_logp: float | None = None
    """Keep only slots with log p̃ > min_logp (compatibility: −3); None: every slot."""
    fp32_logits: bool = False
    """Compute the output head's product in fp32 on both sides (SGLang's ``enable_fp32_lm_head``,
    the embedded engine's and the actor's head: :mod:`soft_spatial.softthink.logits`) instead of
    in the model's dtype; nothing changes for an fp32 model. Off by default, by the CPU study
    (docs/sglang.md, "bf16 and the replay check"): in bf16 it removes the head's own rounding, not
    the hidden states' differences, so the per-candidate difference Δ shrinks by a quarter to a
    half (0.047 → 0.026 nats RMS at Qwen3-VL-2B's width with the parity weights, 0.37 → 0.27
    with the tiny init),
    while the head costs 7-11× its bf16 time per decode step and 2.7-4.4× per training
    micro-batch on the CPU (``scripts/bench_fp32_logits.py``), with an fp32 copy of the [V, D] head per step
    in SGLang and fp32 [N, V] logits in the actor. For diagnosing a bf16 gap (docs/design.md
    §2.6)."""

    @classmethod
    def reference(cls) -> "DensityConfig":
        """The authors' release's variant (mean over the slots with log p̃ > −3, γ̃ clamped to
        [−1.5, 3]): what ``configs/learning/recipe/synthetic_cpu.yaml`` trains with."""
        return cls(reduce="mean", clamp=(-1.5, 3.0), min_logp=-3.0)

    @property
    def exact(self) -> bool:
        """True for eq. 5 itself (a normalised density of the recorded scores), in any precision."""
        return (self.reduce, self.clamp, self.min_logp) == (DensityConfig.reduce, None, None)

    def __post_init__(self):
        check_field_types(self)
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
    """``likelihood`` (the estimator on the per-step likelihoods) or ``candidates`` (§2.8)."""

    def __post_init__(self):
        check_field_types(self)
        _check(self.over in KL_OVER, type(self).__name__, "over",
               f"must be one of {KL_OVER}, got {self.over!r}")


#: what a training run does when its rollout/replay consistency check fails
REPLAY_ON_EXCEED = ("warn", "stop")


#: the compute dtypes the consistency bound distinguishes: fp32 on both sides, or a 16-bit one
REPLAY_DTYPES = ("float32", "bfloat16", "float16")


@dataclass
class ReplayCheckConfig:
    """The rollout/replay consistency check of training (docs/design.md §3): after each rollout
    the trainer recomputes every response step's likelihood with the policy that decoded it
    (verl's old log-prob: the Gumbel log-density of the recorded scores at soft steps, under
    :class:`DensityConfig`, the token log-prob at discrete steps) and compares it with what the
    rollout recorded; the largest difference over the step's tokens is logged as
    ``soft/replay_max_abs_diff`` (``_soft``, ``_hard``, ``_step0``: soft steps, discrete steps,
    each response's first step) and checked against the bound of the run's compute dtype
    (:meth:`bound_for`; docs/sglang.md, "bf16 and the replay check"; docs/design.md §5.3).

    on_exceed: ``warn`` (a warning on stderr per step naming the metric, its value and the bound,
        and ``soft/replay_check_exceeded`` = 1 in the metrics) or ``stop`` (the step raises before
        the update; the last checkpoint stays and the run resumes from it).
    """

    bound: float | None = None
    """Nats, one bound whatever the dtype; None: the compute dtype's (``fp32_bound`` /
    ``bf16_bound``)."""
    fp32_bound: float = 1e-3
    """Nats, when the rollout and the actor both compute in fp32: fp32 runs measure ≤ 1e-3 on
    the CPU (3e-5 in training, the exact and the reference density alike), where only the order
    of fp32 additions differs (KV-cached decoding against one forward)."""
    bf16_bound: float = 5.0
    """Nats, when either side computes in bf16 (or fp16). Each side rounds its logits to 8
    significant bits and its hidden states differ from the other's; a soft step's density
    multiplies the per-candidate log-prob difference Δ_k by its noise e^{−γ_k} (Exp(1)-distributed,
    up to 16.6 with the engines' 24-bit uniforms: gap = Σ_k[e^{−γ_k}(e^{Δ_k} − 1) − Δ_k]), so the
    largest gap grows with the batch. On the CPU (``scripts/study_bf16_replay.py``) bf16 gives Δ
    of 0.04-0.05 nats RMS where logits are of a real model's size (|ℓ| ≈ 18, the tiny model and
    2B width with the parity weights): the largest gap was 0.47 over 384 soft steps, and a batch
    of 10⁶ soft steps with Δ ≤ 0.1 (|ℓ| ≲ 32) keeps its largest gap near 1.8-3.6 nats, above 5
    only where a candidate's noise sits at the generator's floor (8-25% of such batches, none up
    to 10⁵ steps); an exchanged candidate, a shifted position or a mixture fed back at another τ
    gave 17-161 nats. Logits of magnitude ~100 (the tiny init at
    2B width: Δ 0.37) pass it from rounding alone (12.9 over 384 steps): there bf16 cannot tell
    rounding from a mismatch, and the check needs fp32 (docs/design.md §5.3)."""
    on_exceed: str = "warn"
    """``warn`` | ``stop``; see above."""

    def bound_for(self, dtype: str) -> float:
        """The bound for a run whose lowest compute precision is ``dtype`` (one of
        :data:`REPLAY_DTYPES`): ``bound`` if set, else ``fp32_bound`` for float32 and
        ``bf16_bound`` for the 16-bit types (fp16's finer rounding is covered by bf16's)."""
        if dtype not in REPLAY_DTYPES:
            raise ValueError(f"ReplayCheckConfig.bound_for: dtype must be one of {REPLAY_DTYPES}, "
                             f"got {dtype!r}")
        if self.bound is not None:
            return self.bound
        return self.fp32_bound if dtype == "float32" else self.bf16_bound

    def __post_init__(self):
        check_field_types(self)
        n = type(self).__name__
        for name in ("bound", "fp32_bound", "bf16_bound"):
            value = getattr(self, name)
            _check(value is None or value > 0, n, name, f"must be > 0 (nats), got {value}")
        _check(self.on_exceed in REPLAY_ON_EXCEED, n, "on_exceed",
               f"must be one of {REPLAY_ON_EXCEED}, got {self.on_exceed!r}")


@dataclass
class AlignmentConfig:
    """Controller training by gradient alignment (§2.9–2.10).

    enabled=False is the "w/o gradient alignment" ablation (φ gets the GRPO loss's own gradient
    through τ); center=False the "w/o centring" ablation.
    """

    enabled: bool = True
    """Train φ by gradient alignment (``false``: the GRPO loss's own τ-gradient)."""
    ref_fraction: float = 0.25
    """Share of each micro-batch's sequences in the reference set R (at least one)."""
    beta: float = 0.99
    """β of the EMA m ← β·m + (1−β)·q of RMS(α)."""
    target: float = 1e-3
    """c_sc in κ = min(κ_max, c_sc/(m + ε)): the scaled scores' RMS."""
    max_scale: float = 1e6
    """κ_max, the cap of κ (and κ before the first update)."""
    eps: float = 1e-30
    """ε in κ's denominator."""
    center: bool = True
    """Centre g_τ per rollout (``false``: the no_centering ablation)."""
    lr: float = 1e-3
    """The controller's AdamW learning rate."""
    weight_decay: float = 0.01
    """The controller's AdamW weight decay."""
    grad_clip: float = 1.0
    """The controller's gradient-norm clip."""
    vocab_block: int = 8192
    """Vocabulary ids per block when forming W_t = d_tᵀ G_ref (memory, not results)."""

    def __post_init__(self):
        check_field_types(self)
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
