"""The soft settings of a run, below the engines and the rollout servers.

* :class:`SoftSettings` — ``actor_rollout_ref.rollout.custom`` parsed once into the typed configs
  (one copy for the rollout servers and the training workers; no verl import, so the entry
  point can check it in a second, before Ray starts);
* the seeds: :func:`row_seed` (one generated row) and :func:`request_seed` (one verl request,
  from its noise key: :func:`noise_key`, never from verl's random request id);
* :func:`sampling_config`: verl's sampling params → :class:`~soft_spatial.softthink.SamplingConfig`
  (both soft rollout servers).
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from soft_spatial.softthink import (AdaptSoftConfig, AlignmentConfig, DensityConfig, KLConfig,
                                    SamplingConfig, SoftThinkingConfig, check_field_types,
                                    from_mapping)

__all__ = ["SoftSettings", "row_seed", "request_seed", "request_row_seed", "sampling_config",
           "noise_key", "NOISE_PARAM"]

_GROUPS = {"soft_thinking": SoftThinkingConfig, "adaptsoft": AdaptSoftConfig,
           "density": DensityConfig, "alignment": AlignmentConfig, "kl": KLConfig}
_SCALARS = ("seed", "batch_window_s", "max_batch_rows", "stream_wait_s")


@dataclass
class SoftSettings:
    """``rollout.custom``: the config groups (missing groups take the paper defaults) and the
    rollout server's scalars (noise base seed, batching window, rows per batch, and how long
    the local_soft server waits for the missing rows of a generation batch, ``stream_wait_s``)."""

    soft_thinking: SoftThinkingConfig = field(default_factory=SoftThinkingConfig)
    adaptsoft: AdaptSoftConfig = field(default_factory=AdaptSoftConfig)
    density: DensityConfig = field(default_factory=DensityConfig)
    alignment: AlignmentConfig = field(default_factory=AlignmentConfig)
    kl: KLConfig = field(default_factory=KLConfig)
    seed: int = 0
    batch_window_s: float = 0.02
    max_batch_rows: int = 64
    stream_wait_s: float = 120.0

    def __post_init__(self):
        check_field_types(self)  # e.g. rollout.custom.seed=abc: an error naming the field

    @classmethod
    def from_custom(cls, custom: dict[str, Any] | None) -> "SoftSettings":
        custom = dict(custom or {})
        unknown = sorted(set(custom) - set(_GROUPS) - set(_SCALARS))
        if unknown:
            raise ValueError(f"rollout.custom: unknown keys {unknown}; known: soft_thinking, "
                             f"adaptsoft, density, alignment, kl, {sorted(_SCALARS)}")
        groups = {key: from_mapping(cfg_cls, custom.get(key), f"rollout.custom.{key}")
                  for key, cfg_cls in _GROUPS.items()}
        return cls(**groups, **{k: custom[k] for k in _SCALARS if k in custom})


def row_seed(prompt_seed: int, sample_index: int) -> int:
    """Seed of one row's generator: a function of its prompt's seed and its sample index only,
    so a row decodes the same alone or in any batch."""
    return prompt_seed * 10_007 + sample_index


def request_seed(base: int, key: str) -> int:
    """A stable per-request seed (64 bits of BLAKE2b of the key), so a request's noise does not
    depend on which other requests share its batch. ``key`` is the request's :func:`noise_key`
    (verl's request ids are random: seeding from them made every run draw different noise)."""
    digest = hashlib.blake2b(str(key).encode(), digest_size=8).digest()
    return (base * 1_000_003 + int.from_bytes(digest, "little")) % (2 ** 62)


#: the sampling-params entry that carries a verl rollout's noise key (and the size of its
#: generation batch) from the agent loop to the soft rollout servers, which remove it
NOISE_PARAM = "soft_noise"


def noise_key(validate: bool, step: int, call: int, position: int) -> str:
    """The noise key of one verl rollout: row ``position`` of the ``call``-th generation batch
    of training step ``step`` (validation batches apart), e.g. ``"train3.0/17"``. A function of
    the run's schedule only, so two runs of one configuration draw the same noise (§2.2)."""
    return f"{'val' if validate else 'train'}{int(step)}.{int(call)}/{int(position)}"


def request_row_seed(base: int, key: str) -> int:
    """The noise seed of the verl request with noise key ``key`` (one sample): the same in the
    local_soft server (a batch of one-sample prompts) and in the sglang_soft server and
    scheduler."""
    return row_seed(request_seed(base, key), 0)


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
