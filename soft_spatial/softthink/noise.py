"""The rollout noise, in one place (docs/design.md §2.2): a verl rollout's noise key, the seeds
derived from it, the counter-based uniforms every engine draws, and the names under which the key
travels from the trainer to the rollout servers.

* :class:`NoiseKey` — which rollout a row is: training or validation, training step, the
  how-many-th generation batch of that step, the row's position in it. Written by
  :meth:`NoiseKey.__str__` (``"train3.0/17"``) and read back by :meth:`NoiseKey.parse`, nowhere
  else;
* the seeds: :func:`row_seed` (one generated row of a prompt), :func:`request_seed` (one verl
  request, from its noise key: never from verl's random request id) and
  :func:`request_row_seed` (the seed both soft rollout servers give a verl request);
* the uniforms: :func:`seed_tensor` (Python seeds → int64) and :func:`noise_uniforms` (one
  block of uniforms per row and step, a function of the row's seed and the step only);
* the wire: the generation batch's columns the trainer fills (:data:`NOISE_KEY`,
  :data:`NOISE_ROWS`) and the sampling-params entry the soft agent loop adds for the servers
  (:data:`NOISE_PARAM`, written by :func:`noise_param`, read by :func:`pop_noise_param`).

Pure Python and PyTorch; imports nothing of verl or sglang.
"""
from __future__ import annotations

import hashlib
import operator
import re
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

__all__ = ["NoiseKey", "row_seed", "request_seed", "request_row_seed", "seed_tensor",
           "noise_uniforms", "premix_seed", "step_uniforms", "NOISE_KEY", "NOISE_ROWS", "NOISE_PARAM", "noise_param",
           "pop_noise_param"]

_PHASES = {False: "train", True: "val"}
_KEY = re.compile(r"(train|val)(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)/(0|[1-9][0-9]*)")


@dataclass(frozen=True)
class NoiseKey:
    """The noise key of one verl rollout: row ``position`` of the ``call``-th generation batch of
    training step ``step``, validation batches apart (``validate``). A function of the run's
    schedule only, so two runs of one configuration draw the same noise (§2.2).

    ``str(key)`` is its one text form, ``"<train|val><step>.<call>/<position>"`` (e.g.
    ``"train3.0/17"``); :meth:`parse` reads exactly that form back (``parse(str(k)) == k``).
    """

    validate: bool
    step: int
    call: int
    position: int

    def __post_init__(self):
        if not isinstance(self.validate, bool):
            raise TypeError(f"NoiseKey.validate must be a bool, got {self.validate!r}")
        for name in ("step", "call", "position"):
            value = getattr(self, name)
            try:
                number = operator.index(value)  # ints and numpy ints, not floats or strings
            except TypeError:
                raise TypeError(f"NoiseKey.{name} must be an integer, got {value!r}") from None
            if number < 0:
                raise ValueError(f"NoiseKey.{name} must be >= 0, got {number}")
            object.__setattr__(self, name, int(number))

    @property
    def batch(self) -> str:
        """The name of the key's generation batch (the text before ``/``, e.g. ``"train3.0"``):
        the rows of one batch share it."""
        return f"{_PHASES[self.validate]}{self.step}.{self.call}"

    def __str__(self) -> str:
        return f"{self.batch}/{self.position}"

    @classmethod
    def parse(cls, text: str) -> "NoiseKey":
        """The key whose text form is ``text``; a ValueError naming it for anything else."""
        m = _KEY.fullmatch(text) if isinstance(text, str) else None
        if m is None:
            raise ValueError(f"bad noise key {text!r}: expected '<train|val><step>.<call>/"
                             f"<position>' with non-negative integers, e.g. 'train3.0/17'")
        phase, step, call, position = m.groups()
        return cls(phase == "val", int(step), int(call), int(position))


# -- seeds -----------------------------------------------------------------------------------------
def row_seed(prompt_seed: int, sample_index: int) -> int:
    """Seed of one row's generator: a function of its prompt's seed and its sample index only,
    so a row decodes the same alone or in any batch."""
    return prompt_seed * 10_007 + sample_index


def request_seed(base: int, key: NoiseKey | str) -> int:
    """A stable per-request seed (64 bits of BLAKE2b of the key's text), so a request's noise
    does not depend on which other requests share its batch. ``key`` is the request's
    :class:`NoiseKey` (verl's request ids are random: seeding from them made every run draw
    different noise); a request without one is seeded from its request id."""
    digest = hashlib.blake2b(str(key).encode(), digest_size=8).digest()
    return (base * 1_000_003 + int.from_bytes(digest, "little")) % (2 ** 62)


def request_row_seed(base: int, key: NoiseKey | str) -> int:
    """The noise seed of the verl request with noise key ``key`` (one sample): the same in the
    local_soft server (a batch of one-sample prompts) and in the sglang_soft server and
    scheduler."""
    return row_seed(request_seed(base, key), 0)


# -- the counter-based uniforms --------------------------------------------------------------------
# splitmix64 (Steele, Lea, Flood 2014) in int64 arithmetic: products wrap modulo 2^64 on every
# device, right shifts are made logical by masking; constants as signed 64-bit integers.
_GOLDEN, _M1, _M2 = -0x61C8864680B583EB, -0x40A7B892E31B1A47, -0x6B2FB644ECCEEE15


def _shr(x: Tensor, s: int) -> Tensor:
    return (x >> s) & ((1 << (64 - s)) - 1)


def _mix64(z: Tensor) -> Tensor:
    z = z + _GOLDEN
    z = (z ^ _shr(z, 30)) * _M1
    z = (z ^ _shr(z, 27)) * _M2
    return z ^ _shr(z, 31)


def seed_tensor(seeds, device=None) -> Tensor:
    """Python integer seeds (any size) → int64 ``[b]``, each taken modulo 2^64."""
    vals = [int(s) & (2 ** 64 - 1) for s in seeds]
    return torch.tensor([v - 2 ** 64 if v >= 2 ** 63 else v for v in vals], dtype=torch.int64,
                        device=device)


def noise_uniforms(seed: Tensor, step: Tensor | int, n: int) -> Tensor:
    """The uniforms of one decoding step: ``[b, n]`` fp32 in [0, 1) for rows with seeds
    ``seed [b]`` (int64, :func:`seed_tensor`) at their step ``step`` (``[b]`` or an int) (§2.2).

    Counter-based: U[r, j] = (h(seed_r, step_r, j) >> 40) · 2^-24 with h the splitmix64
    finaliser chained over the three integers, so a row's noise is a function of (seed, step)
    alone — not of the batch, the device (exact integer arithmetic, an exact 24-bit float) or
    the history (no generator state; a re-prefilled request just recomputes it).
    """
    return step_uniforms(premix_seed(seed), step, n)


def premix_seed(seed: Tensor) -> Tensor:
    """The first link of :func:`noise_uniforms`' chain, h₀ = mix(seed) ``[b]`` int64: a function
    of the seed alone, so an engine that keeps a row's seed for many steps computes it once
    (the SGLang plugin keeps it per request-pool slot)."""
    return _mix64(seed.to(torch.int64))


def step_uniforms(premixed: Tensor, step: Tensor | int, n: int) -> Tensor:
    """:func:`noise_uniforms` from the premixed seeds ``premixed [b]`` (:func:`premix_seed`):
    the same integers, the same ops after the first link, so the same bits."""
    step = torch.as_tensor(step, dtype=torch.int64, device=premixed.device).expand(premixed.shape)
    j = torch.arange(n, dtype=torch.int64, device=premixed.device)
    h = _mix64(_mix64(premixed ^ step)[:, None] ^ j)
    return _shr(h, 40).to(torch.float32) * 2.0 ** -24


# -- the wire --------------------------------------------------------------------------------------
#: the generation batch's columns the trainer fills (``integration.ppo_trainer.tag_noise_keys``):
#: each row's noise key (its text form), and the batch's size when one rollout server receives
#: all of it (else 0)
NOISE_KEY, NOISE_ROWS = "soft_noise_key", "soft_noise_rows"
#: the sampling-params entry that carries a verl rollout's noise key (and the size of its
#: generation batch) from the agent loop to the soft rollout servers, which remove it
NOISE_PARAM = "soft_noise"


def noise_param(key: NoiseKey | str, rows: int) -> dict[str, Any]:
    """The sampling-params entry for a request with noise key ``key`` whose generation batch has
    ``rows`` rows on its server (0: unknown), as ``{NOISE_PARAM: {...}}``."""
    return {NOISE_PARAM: {"key": str(key), "rows": int(rows)}}


def pop_noise_param(params: dict[str, Any]) -> tuple[NoiseKey | None, int]:
    """Remove the :func:`noise_param` entry from ``params`` (sampling params, modified in place)
    and return its key (parsed; None without an entry) and its row count (0 when unknown). A
    malformed key is a ValueError naming it."""
    entry = params.pop(NOISE_PARAM, None) or {}
    key = entry.get("key")
    return (None if key is None else NoiseKey.parse(key)), int(entry.get("rows", 0))
