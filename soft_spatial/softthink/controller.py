"""AdaptSoft: the per-step mixture-temperature controller (docs/design.md §2.4, §2.5, §2.7).

    x = [P·LN(h) ‖ Ĥ_s]                       features, [..., d_p + 1]
    u = MLP(x) + a·Ĥ_s + b                    MLP = Linear(·, width) → GELU → Linear(width, 1)
    τ = τ₀ + Δ·tanh(u)                        0 < Δ < τ₀, so τ ∈ (τ₀ − Δ, τ₀ + Δ)

P ∈ R^{d_p×D} is a fixed random projection (entries N(0,1)/√D, drawn from ``seed``), stored in the
state dict and never trained. The output layer, a and b start at zero, so τ = τ₀ exactly at
initialisation. The features are always recorded in full (``[d_p + 1]``); the ablations
``use_hidden=False`` / ``use_entropy=False`` only change which columns the MLP reads.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import time
from collections.abc import Mapping
from pathlib import Path

import torch
from torch import Tensor, nn

from soft_spatial.infra.atomic import atomic_open
from soft_spatial.softthink.config import AdaptSoftConfig
from soft_spatial.softthink.mixture import normalized_entropy

__all__ = ["AdaptSoft", "ControllerState", "ENTROPY_EPS", "FINGERPRINT_LOG_ENV",
           "log_fingerprint", "state_fingerprint"]

FINGERPRINT_LOG_ENV = "SOFT_SPATIAL_CONTROLLER_LOG"  # a directory: log_fingerprint writes there

ENTROPY_EPS = 1e-6  # ε_H in Ĥ_s = (Ĥ − μ_H)/(σ_H + ε_H)


@dataclasses.dataclass(frozen=True)
class ControllerState:
    """An AdaptSoft controller as data: what builds it (``hidden_size`` and its
    :class:`AdaptSoftConfig`) and its weights (the state dict, projection P included). What a
    checkpoint stores, weight sync sends to the rollout servers and every engine installs;
    :meth:`AdaptSoft.to_state` and :meth:`AdaptSoft.from_state` convert.

    On disk and on the wire it is the blob ``{"config": {hidden_size, **AdaptSoftConfig},
    "state_dict": {name: tensor}}`` (:meth:`to_blob`, :meth:`from_blob`), which
    ``torch.load(weights_only=True)`` reads: plain containers and tensors only."""

    hidden_size: int
    config: AdaptSoftConfig
    weights: dict[str, Tensor]

    def to_blob(self) -> dict:
        """The blob (detached CPU tensors)."""
        return {"config": dict(hidden_size=self.hidden_size, **dataclasses.asdict(self.config)),
                "state_dict": {k: v.detach().cpu() for k, v in self.weights.items()}}

    @classmethod
    def from_blob(cls, blob, source: str = "the controller state") -> "ControllerState":
        """The state of a blob written by :meth:`to_blob`; anything else is an error naming
        ``source`` (a file, the weight-sync tensor) and what is wrong."""
        if not isinstance(blob, Mapping) or not isinstance(blob.get("config"), Mapping) \
                or not isinstance(blob.get("state_dict"), Mapping):
            raise ValueError(f"{source}: not an AdaptSoft state (expected a dict with a 'config' "
                             f"dict and a 'state_dict' dict)")
        cfg = dict(blob["config"])
        hidden = cfg.pop("hidden_size", None)
        if not isinstance(hidden, int) or isinstance(hidden, bool):
            raise ValueError(f"{source}: config.hidden_size must be an int, got {hidden!r}")
        try:
            config = AdaptSoftConfig(**cfg)
        except (TypeError, ValueError) as e:
            raise ValueError(f"{source}: bad controller config: {e}") from None
        weights = dict(blob["state_dict"])
        bad = [k for k, v in weights.items() if not isinstance(v, Tensor)]
        if bad:
            raise ValueError(f"{source}: state_dict entries that are not tensors: {bad[:5]}")
        return cls(hidden, config, weights)


class _Setting:
    """An :class:`AdaptSoft` setting read from its :attr:`~AdaptSoft.config` (the one copy)."""

    def __set_name__(self, owner, name):
        self.name = name

    def __get__(self, obj, owner=None):
        return self if obj is None else getattr(obj.config, self.name)


class AdaptSoft(nn.Module):
    """Per-step temperature controller f_φ (fp32; replicated on every rank, outside FSDP).

    Args:
        hidden_size: D, the policy's final hidden size.
        config: the controller's settings, :class:`AdaptSoftConfig` (its defaults are the
            paper's; it validates them: 0 < Δ < τ₀, at least one input, ...).
        **settings: fields of :class:`AdaptSoftConfig` replacing those of ``config`` (e.g.
            ``AdaptSoft(16, width=8, seed=3)``, or a checkpoint's :meth:`config_dict`).
    """

    def __init__(self, hidden_size: int, config: AdaptSoftConfig | None = None, **settings):
        super().__init__()
        cfg = dataclasses.replace(config or AdaptSoftConfig(), **settings)
        if hidden_size <= 0:
            raise ValueError(f"hidden_size must be positive, got {hidden_size}")
        self.config, self.hidden_size = cfg, hidden_size
        proj_dim, width, seed = cfg.proj_dim, cfg.width, cfg.seed
        use_hidden, use_entropy = cfg.use_hidden, cfg.use_entropy

        gen = torch.Generator().manual_seed(seed)
        self.register_buffer(
            "projection", torch.randn(proj_dim, hidden_size, generator=gen) / hidden_size ** 0.5)
        in_dim = (proj_dim if use_hidden else 0) + (1 if use_entropy else 0)
        self.fc1 = nn.Linear(in_dim, width)
        self.fc2 = nn.Linear(width, 1)
        with torch.no_grad():  # deterministic init from the same seed, independent of global RNG
            bound = 1.0 / in_dim ** 0.5
            self.fc1.weight.copy_(torch.rand(width, in_dim, generator=gen) * 2 * bound - bound)
            self.fc1.bias.copy_(torch.rand(width, generator=gen) * 2 * bound - bound)
            self.fc2.weight.zero_()
            self.fc2.bias.zero_()
        self.a = nn.Parameter(torch.zeros(()))
        self.b = nn.Parameter(torch.zeros(()))

    # the settings, read from the config (the one copy)
    proj_dim, width, tau0, delta = _Setting(), _Setting(), _Setting(), _Setting()
    entropy_mean, entropy_std, seed = _Setting(), _Setting(), _Setting()
    use_hidden, use_entropy = _Setting(), _Setting()

    @property
    def feature_dim(self) -> int:
        """Width of the recorded feature vector x: d_p + 1."""
        return self.proj_dim + 1

    def standardize_entropy(self, entropy: Tensor) -> Tensor:
        """Ĥ_s = (Ĥ − μ_H)/(σ_H + ε_H)."""
        return (entropy.to(self.projection.dtype) - self.entropy_mean) / (self.entropy_std + ENTROPY_EPS)

    @torch.no_grad()
    def features(self, hidden: Tensor, logp: Tensor, entropy: Tensor | None = None) -> Tensor:
        """x = [P·LN(h) ‖ Ĥ_s] from hidden ``[..., D]`` and candidate log-probs ``[..., K]``
        (or their normalised entropy Ĥ ``[...]``, ``normalized_entropy(logp)``, when the caller
        has it already: the sampler records it too).

        Computed without gradient (the features are recorded at rollout and replayed as constants).
        Returns ``[..., d_p + 1]`` fp32.
        """
        if hidden.shape[-1] != self.hidden_size:
            raise ValueError(f"AdaptSoft was built for hidden_size={self.hidden_size}, got hidden "
                             f"of shape {tuple(hidden.shape)}")
        h = nn.functional.layer_norm(hidden.to(self.projection.dtype), (self.hidden_size,), eps=1e-5)
        proj = h @ self.projection.to(h.device).T
        entropy = normalized_entropy(logp) if entropy is None else entropy
        hs = self.standardize_entropy(entropy).to(proj.device)
        return torch.cat([proj, hs.unsqueeze(-1)], dim=-1)

    def _inputs(self, x: Tensor) -> Tensor:
        if x.shape[-1] != self.feature_dim:
            raise ValueError(f"AdaptSoft features must have {self.feature_dim} columns "
                             f"(proj_dim + 1), got shape {tuple(x.shape)}")
        if self.use_hidden and self.use_entropy:
            return x
        return x[..., : self.proj_dim] if self.use_hidden else x[..., self.proj_dim:]

    def forward(self, x: Tensor) -> Tensor:
        """u = MLP(x) + a·Ĥ_s + b, shape ``x.shape[:-1]`` (fp32)."""
        x = x.to(self.fc1.weight.dtype)
        u = self.fc2(nn.functional.gelu(self.fc1(self._inputs(x)))).squeeze(-1) + self.b
        if self.use_entropy:
            u = u + self.a * x[..., -1]
        return u

    def temperature(self, u: Tensor) -> Tensor:
        """τ = τ₀ + Δ·tanh(u)."""
        return self.tau0 + self.delta * torch.tanh(u)

    def replay_temperature(self, x_roll: Tensor, u_roll: Tensor) -> Tensor:
        """Straight-through τ for the update (§2.7).

        ũ = f_φ(sg(x)), u_upd = sg(u_roll) + ũ − sg(ũ), τ_upd = τ₀ + Δ tanh(u_upd): the value is
        the rollout's τ exactly and ∂τ_upd/∂φ = Δ(1 − tanh²(u_roll))·∂ũ/∂φ.
        """
        u_new = self.forward(x_roll.detach())
        u_upd = u_roll.detach().to(u_new.dtype) + (u_new - u_new.detach())
        return self.temperature(u_upd)

    def extra_repr(self) -> str:
        return (f"hidden_size={self.hidden_size}, proj_dim={self.proj_dim}, width={self.width}, "
                f"tau0={self.tau0}, delta={self.delta}, use_hidden={self.use_hidden}, "
                f"use_entropy={self.use_entropy}")

    @classmethod
    def from_config(cls, cfg, hidden_size: int) -> "AdaptSoft":
        """Build from an :class:`~soft_spatial.softthink.config.AdaptSoftConfig`."""
        return cls(hidden_size, cfg)

    def config_dict(self) -> dict:
        """Constructor arguments (``hidden_size`` and every :class:`AdaptSoftConfig` field), saved
        beside the state dict so a checkpoint rebuilds itself with ``AdaptSoft(**config)``."""
        return dict(hidden_size=self.hidden_size, **dataclasses.asdict(self.config))

    def to_state(self) -> ControllerState:
        """This controller as data (detached CPU copies of its weights)."""
        return ControllerState(self.hidden_size, self.config,
                               {k: v.detach().cpu().clone() for k, v in self.state_dict().items()})

    @classmethod
    def from_state(cls, state: ControllerState, into: "AdaptSoft" | None = None) -> "AdaptSoft":
        """The controller of ``state``: its weights loaded into ``into`` (in place) when that
        controller was built the same way (hidden size and config), else into a new one."""
        if not isinstance(state, ControllerState):
            raise TypeError(f"AdaptSoft.from_state takes a ControllerState, got "
                            f"{type(state).__name__}")
        if into is None or (into.hidden_size, into.config) != (state.hidden_size, state.config):
            into = cls(state.hidden_size, state.config)
        into.load_state_dict(state.weights)
        return into

    def save(self, path, extra: dict | None = None) -> None:
        """Write :meth:`to_state`'s blob (and ``extra``) to ``path`` with torch.save (atomically:
        a temporary file renamed into place)."""
        with atomic_open(path, "wb") as f:
            torch.save({**self.to_state().to_blob(), **(extra or {})}, f)

    @staticmethod
    def read_checkpoint(path, map_location="cpu") -> ControllerState:
        """The controller state of a file written by :meth:`save` or of a training checkpoint's
        ``adaptsoft.pt``; an unreadable file is an error naming it."""
        try:
            blob = torch.load(path, map_location=map_location, weights_only=True)
        except FileNotFoundError:
            raise FileNotFoundError(f"AdaptSoft checkpoint {path} does not exist") from None
        except Exception as e:  # truncated or foreign files raise OSError, RuntimeError, ...
            raise ValueError(f"{path}: cannot read the AdaptSoft checkpoint "
                             f"({type(e).__name__}: {e})") from e
        if isinstance(blob, dict) and "controller_config" in blob and "controller" in blob:
            blob = {"config": blob["controller_config"], "state_dict": blob["controller"]}
        return ControllerState.from_blob(blob, source=str(path))

    @classmethod
    def load(cls, path, map_location="cpu") -> "AdaptSoft":
        """Rebuild a controller written by :meth:`save`, or the controller inside a training
        checkpoint's ``adaptsoft.pt`` (projection included)."""
        return cls.from_state(cls.read_checkpoint(path, map_location))


def state_fingerprint(state_dict: Mapping[str, Tensor]) -> str:
    """sha256 (hex) of a state dict: every entry's name, shape and values, in name order.

    Floating values are hashed as float64, to which every smaller float format converts exactly:
    the same values give the same fingerprint on any device and in any float dtype (the trainer's
    fp32 CPU copy, SGLang's controller on its GPU), and any changed bit of an fp32 weight changes it.
    """
    h = hashlib.sha256()
    for name in sorted(state_dict):
        t = state_dict[name].detach().to("cpu")
        t = t.to(torch.float64) if t.is_floating_point() else t
        h.update(f"{name}:{tuple(t.shape)}:{t.dtype};".encode())
        h.update(t.contiguous().numpy().tobytes())
    return h.hexdigest()


def log_fingerprint(side: str, controller: nn.Module | Mapping[str, Tensor] | None,
                    **fields) -> str | None:
    """Append ``{"side", "pid", "time", "sha256", **fields}`` to
    ``$SOFT_SPATIAL_CONTROLLER_LOG/<side>-<pid>.jsonl`` and return the fingerprint, when that
    variable is set and there is a controller (a module or its state dict); else do nothing.

    The trainer logs what it sends at each weight sync, the SGLang plugin what it installed: the GPU
    kit's stage e (soft_spatial_bench/gpu/grpo.py) checks that the two sequences are equal."""
    root = os.environ.get(FINGERPRINT_LOG_ENV)
    if not root or controller is None:
        return None
    sd = controller.state_dict() if isinstance(controller, nn.Module) else controller
    fp = state_fingerprint(sd)
    path = Path(root) / f"{side}-{os.getpid()}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as f:  # one short line per sync: appends stay whole
        f.write(json.dumps({"side": side, "pid": os.getpid(), "time": time.time(), "sha256": fp,
                            **fields}) + "\n")
    return fp
