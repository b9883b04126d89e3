"""The soft settings of a run: one type from the command line to every process that decodes.

* :class:`SoftSettings` — the settings block (``actor_rollout_ref.rollout.custom`` in training, the
  ``soft`` block in evaluation), parsed once by the entry point and carried as
  :meth:`SoftSettings.to_dict` everywhere else: in verl's config to the workers, as a Ray actor
  argument to the local server, in the SGLang schedulers' environment
  (:class:`~soft_spatial.engines.sglang.server_args.SchedulerSetup` wraps it), and in the run's
  :data:`SETTINGS_FILE`, which export copies into the model directory and evaluation reads back
  (:meth:`SoftSettings.load`). One reader of verl's block, :meth:`SoftSettings.from_rollout`,
  serves every place that starts from verl's config. No verl import, so the entry point can
  check it in a second;
* :func:`sampling_config`: verl's sampling params → :class:`~soft_spatial.softthink.SamplingConfig`
  (both soft rollout servers).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from soft_spatial.infra.atomic import write_text
from soft_spatial.softthink import (AdaptSoftConfig, AlignmentConfig, DensityConfig, KLConfig,
                                    ReplayCheckConfig, SamplingConfig, SoftThinkingConfig,
                                    check_field_types, from_mapping)

__all__ = ["SoftSettings", "SETTINGS_FILE", "OLD_SETTINGS_FILE", "settings_file", "ROLLOUT_KEY",
           "CONTROLLER_FILE", "sampling_config"]

#: the run's settings (``SoftSettings.to_dict()`` as YAML): written by training beside its
#: checkpoints, copied by export into the model directory, read by evaluation
SETTINGS_FILE = "soft_settings.yaml"
#: the same file's earlier name (runs and exports before 2026-11-23, read until 729c705): refused
#: with a line saying to rename it
OLD_SETTINGS_FILE = "soft_thinking.yaml"
#: where verl's config carries the settings block (the key is verl's)
ROLLOUT_KEY = "actor_rollout_ref.rollout.custom"
#: the trained AdaptSoft controller beside it (each checkpoint's, and the exported model's)
CONTROLLER_FILE = "adaptsoft.pt"

_GROUPS = {"soft_thinking": SoftThinkingConfig, "adaptsoft": AdaptSoftConfig,
           "density": DensityConfig, "alignment": AlignmentConfig, "kl": KLConfig,
           "replay_check": ReplayCheckConfig}
_SCALARS = ("seed", "batch_window_s", "max_batch_rows", "stream_wait_s")


def _plain(value):
    """Tuples as lists (YAML, JSON and OmegaConf hold lists), recursively."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


@dataclass
class SoftSettings:
    """The soft settings of a run (a missing group or scalar takes its default, the paper's value).

    soft_thinking: how the chain of thought is decoded (mode, K, noise scale c, fixed τ, think end).
    adaptsoft: the controller's shape and its τ range (τ0, δ) and entropy normalisation (μ_H, σ_H).
    density: the soft-step likelihood variant (eq. 5; reference-compatibility switches).
    alignment: the controller's training by gradient alignment (optimizer, scaler, ablations).
    kl: what the KL to the reference compares at soft steps.
    seed: base seed of the per-request rollout noise (a request's seed derives from it and its
        noise key).
    batch_window_s: how long the local_soft server gathers requests without a noise key into
        one batch.
    max_batch_rows: rows the local_soft server decodes together.
    stream_wait_s: how long the local_soft server waits for the missing rows of a generation
        batch before decoding the rows it has.
    """

    soft_thinking: SoftThinkingConfig = field(default_factory=SoftThinkingConfig)
    adaptsoft: AdaptSoftConfig = field(default_factory=AdaptSoftConfig)
    density: DensityConfig = field(default_factory=DensityConfig)
    alignment: AlignmentConfig = field(default_factory=AlignmentConfig)
    kl: KLConfig = field(default_factory=KLConfig)
    replay_check: ReplayCheckConfig = field(default_factory=ReplayCheckConfig)
    seed: int = 0
    batch_window_s: float = 0.02
    max_batch_rows: int = 64
    stream_wait_s: float = 120.0

    def __post_init__(self):
        check_field_types(self)  # e.g. rollout.custom.seed=abc: an error naming the field
        for name, least in (("max_batch_rows", 1), ("batch_window_s", 0), ("stream_wait_s", 0)):
            if getattr(self, name) < least:
                raise ValueError(f"{name} must be >= {least}, got {getattr(self, name)}")

    def to_dict(self) -> dict[str, Any]:
        """Every group and scalar as plain YAML/JSON values; ``from_dict`` reads it back equal."""
        return _plain(dataclasses.asdict(self))

    @classmethod
    def from_rollout(cls, rollout: Any) -> "SoftSettings":
        """The settings in verl's rollout config (``actor_rollout_ref.rollout``: a DictConfig or
        verl's ``RolloutConfig``), read from its ``custom`` block: the one reader of verl's
        config, used by the entry point, the trainer, the worker and both rollout servers."""
        custom = rollout.get("custom") if hasattr(rollout, "get") else getattr(rollout, "custom",
                                                                                None)
        return cls.from_dict(custom, where=ROLLOUT_KEY)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None, where: str = "rollout.custom") -> "SoftSettings":
        """Read a settings block (a dict, an OmegaConf node, a loaded YAML file); unknown keys and
        invalid values raise a ValueError naming the setting's path under ``where``."""
        if d is None:
            d = {}
        if not isinstance(d, Mapping):
            raise ValueError(f"{where}: expected a mapping of soft settings, got {d!r}")
        d = dict(d)
        unknown = sorted(set(d) - set(_GROUPS) - set(_SCALARS))
        if unknown:
            raise ValueError(f"{where}: unknown keys {unknown}; known: {sorted(_GROUPS)}, "
                             f"{sorted(_SCALARS)}")
        groups = {}
        for key, group_cls in _GROUPS.items():
            try:
                groups[key] = from_mapping(group_cls, d.get(key))
            except (TypeError, ValueError) as e:
                raise ValueError(f"{where}.{key}: {e}") from None
        try:
            return cls(**groups, **{k: d[k] for k in _SCALARS if k in d})
        except ValueError as e:
            raise ValueError(f"{where}: {e}") from None

    def save(self, path: str | Path) -> None:
        """Write :meth:`to_dict` as YAML to ``path`` (atomically)."""
        write_text(path, yaml.safe_dump(self.to_dict(), sort_keys=False))

    @classmethod
    def load(cls, path: str | Path) -> "SoftSettings":
        """Read a file written by :meth:`save` (or an older run's partial block: missing settings
        take their defaults); errors name the file."""
        return cls.from_dict(yaml.safe_load(Path(path).read_text(encoding="utf-8")), where=str(path))

    @classmethod
    def exported(cls, model_dir: str | Path) -> "SoftSettings | None":
        """The settings a model directory written by ``python -m soft_spatial.export`` carries
        (None when it has no settings file: not an export)."""
        path = settings_file(model_dir)
        return cls.load(path) if path is not None else None


def settings_file(directory: str | Path) -> Path | None:
    """The settings file in ``directory`` (:data:`SETTINGS_FILE`); None when there is none. A
    file under the old name only (:data:`OLD_SETTINGS_FILE`) is refused, naming the new one."""
    path, old = Path(directory) / SETTINGS_FILE, Path(directory) / OLD_SETTINGS_FILE
    if path.is_file():
        return path
    if old.is_file():
        raise FileNotFoundError(f"{old}: the soft settings' file has a new name; rename it "
                                f"{SETTINGS_FILE} (its content is the same)")
    return None


def sampling_config(params: dict[str, Any], response_length: int) -> SamplingConfig:
    """verl sampling params → the discrete-step settings, for both soft rollout servers
    (local_soft and sglang_soft): temperature 0 means greedy, top_k ≤ 0 or -1 means off."""
    max_new = params.get("max_new_tokens", params.get("max_tokens", response_length))
    max_new = max(1, min(int(max_new), response_length))
    temperature = float(params.get("temperature", 1.0))
    top_k = int(params.get("top_k", -1) or -1)
    return SamplingConfig(temperature=max(temperature, 1e-5), max_new_tokens=max_new,
                          top_k=max(0, top_k), top_p=float(params.get("top_p", 1.0) or 1.0),
                          greedy=temperature == 0)
