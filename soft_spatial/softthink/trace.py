"""SoftTrace: the per-step rollout record (docs/design.md §3).

One record per generated position, in generation order, same length as the response:

    topk_ids [K] int64   slot order = descending z; slot 0 = spine (the emitted token)
    scores   [K] fp32    z (perturbed candidate log-probs)
    tau      fp32        mixture temperature used at this step
    u        fp32        controller pre-activation (τ = τ₀ + Δ tanh u); 0 without a controller
    ctrl_x   [F] fp32    controller features x = [P·LN(h) ‖ Ĥ_s] (F = d_p + 1; zeros without one)
    entropy  fp32        Ĥ, normalised top-K entropy
    soft     bool        False for discrete steps, recorded as topk_ids=[token,0…], scores=[0…]

Records travel linearly: an engine records one batched step at a time (:class:`TraceRecorder`) and
sends each step once (:meth:`SoftTrace.to_lists` / :meth:`SoftTrace.from_lists`). On the wire (both
rollout backends' ``extra_fields``, then verl's ``non_tensor_batch``) a response's records travel as
``SoftTrace.to_lists()`` under the key :data:`TRACE_FIELD`. For training,
:func:`collate_traces` right-pads a batch into tensors aligned with verl's response positions, and
:func:`uncollate_traces` inverts it losslessly.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from collections.abc import Sequence

import torch
from torch import Tensor

__all__ = ["RecordFields", "SoftTrace", "StepRecord", "TraceRecorder", "collate_traces",
           "uncollate_traces", "TRACE_KEYS", "TRACE_FIELD", "TRACE_PREFIX"]

TRACE_FIELD = "soft_trace"  # wire key of a response's records (SoftTrace.to_lists()) in both rollout backends
TRACE_PREFIX = "trace_"  # collated records in a training batch: trace_<field> [B, R, ...] and trace_mask


def _record(dtype: torch.dtype, width: str | None = None):
    """A record field of :class:`SoftTrace`: its dtype and its width per step (None: one value;
    ``"k"``: the K candidates; ``"f"``: the F controller features)."""
    return field(metadata={"dtype": dtype, "width": width})


@dataclass(eq=False)
class RecordFields:
    """The record schema, declared once: each field's dtype and width live in its metadata; a
    response's steps (:class:`SoftTrace`, ``[L, ...]``), one batched step (:class:`StepRecord`,
    ``[rows, ...]``), :data:`TRACE_KEYS`, the collated layout and the SGLang plugin's packed rows
    all derive from it, so a new record field is one line here."""

    topk_ids: Tensor = _record(torch.long, "k")  # [L, K]
    scores: Tensor = _record(torch.float32, "k")  # [L, K]
    tau: Tensor = _record(torch.float32)  # [L]
    u: Tensor = _record(torch.float32)  # [L]
    ctrl_x: Tensor = _record(torch.float32, "f")  # [L, F]
    entropy: Tensor = _record(torch.float32)  # [L]
    soft: Tensor = _record(torch.bool)  # [L] the soft-step mask (a record field: the name is part of the format)

    def record_fields(self) -> dict[str, Tensor]:
        """The record fields by name, in their order (:data:`TRACE_KEYS`)."""
        return {name: getattr(self, name) for name in TRACE_KEYS}


@dataclass
class SoftTrace(RecordFields):
    """Records of one response (L steps). All tensors live on the CPU unless moved; every field
    is checked and cast to its dtype."""

    def __post_init__(self):
        n = self.topk_ids.shape[0]
        for f in fields(self):
            t = getattr(self, f.name)
            if not isinstance(t, Tensor):
                raise TypeError(f"SoftTrace.{f.name} must be a tensor, got {type(t).__name__}")
            if t.shape[0] != n:
                raise ValueError(f"SoftTrace.{f.name} has {t.shape[0]} steps, topk_ids has {n}")
            setattr(self, f.name, t.to(_DTYPES[f.name]))
        if self.scores.shape != self.topk_ids.shape:
            raise ValueError(f"SoftTrace.scores {tuple(self.scores.shape)} must match topk_ids "
                             f"{tuple(self.topk_ids.shape)}")

    # -- construction -------------------------------------------------------------------------
    @classmethod
    def empty(cls, k: int, feature_dim: int) -> "SoftTrace":
        z = torch.zeros(0)
        return cls(torch.zeros(0, k, dtype=torch.long), torch.zeros(0, k), z, z,
                   torch.zeros(0, feature_dim), z, torch.zeros(0, dtype=torch.bool))

    @classmethod
    def discrete(cls, tokens: Sequence[int], k: int, feature_dim: int) -> "SoftTrace":
        """Records of discrete steps: topk_ids=[token, 0…], scores=[0…], soft=False."""
        n = len(tokens)
        ids = torch.zeros(n, k, dtype=torch.long)
        ids[:, 0] = torch.as_tensor(list(tokens), dtype=torch.long)
        z = torch.zeros(n)
        return cls(ids, torch.zeros(n, k), z, z.clone(), torch.zeros(n, feature_dim), z.clone(),
                   torch.zeros(n, dtype=torch.bool))

    @classmethod
    def concat(cls, traces: Sequence["SoftTrace"]) -> "SoftTrace":
        if not traces:
            raise ValueError("SoftTrace.concat needs at least one trace")
        return cls(*(torch.cat([getattr(t, k) for t in traces]) for k in TRACE_KEYS))

    # -- access --------------------------------------------------------------------------------
    def __len__(self) -> int:
        return self.topk_ids.shape[0]

    @property
    def k(self) -> int:
        return self.topk_ids.shape[1]

    @property
    def feature_dim(self) -> int:
        return self.ctrl_x.shape[1]

    @property
    def tokens(self) -> Tensor:
        """The emitted tokens (slot 0 of every record)."""
        return self.topk_ids[:, 0]

    def __getitem__(self, idx) -> "SoftTrace":
        if isinstance(idx, int):
            idx = slice(idx, idx + 1 if idx != -1 else None)
        return SoftTrace(*(getattr(self, k)[idx] for k in TRACE_KEYS))

    def to(self, device) -> "SoftTrace":
        return SoftTrace(*(getattr(self, k).to(device) for k in TRACE_KEYS))

    def equal(self, other: "SoftTrace") -> bool:
        """Exact equality of every field (bitwise for floats)."""
        return all(torch.equal(getattr(self, k), getattr(other, k)) for k in TRACE_KEYS)

    # -- linear transport (JSON-able, each step sent once) ------------------------------------
    def to_lists(self) -> dict[str, list]:
        """Plain Python lists (per key, one entry per step), e.g. for an engine's meta_info."""
        return {k: getattr(self, k).tolist() for k in TRACE_KEYS}

    @classmethod
    def from_lists(cls, data: dict[str, list], k: int | None = None,
                   feature_dim: int | None = None) -> "SoftTrace":
        missing = [key for key in TRACE_KEYS if key not in data]
        if missing:
            raise KeyError(f"SoftTrace.from_lists: missing keys {missing}")
        if len(data["topk_ids"]) == 0:
            if k is None or feature_dim is None:
                raise ValueError("SoftTrace.from_lists: an empty trace needs k and feature_dim")
            return cls.empty(k, feature_dim)
        return cls(*(torch.tensor(data[key], dtype=_DTYPES[key]) for key in TRACE_KEYS))


#: the record fields in their order (the positional order of :class:`SoftTrace`)
TRACE_KEYS = tuple(f.name for f in fields(RecordFields))
_DTYPES = {f.name: f.metadata["dtype"] for f in fields(RecordFields)}


@dataclass(eq=False)
class StepRecord(RecordFields):
    """One decoding step of ``rows`` rows, as an engine's sampler makes it
    (:func:`soft_spatial.engines.step.sample_step`): every record field ``[rows, ...]``, the
    step's likelihood under the rollout policy ``loglik [rows]``, and with ``debug`` the mixture
    weights and candidate log-probs ``[rows, K]``. Not checked or cast (a hot path's product:
    the sampler builds it in the fields' dtypes)."""

    loglik: Tensor = _record(torch.float32)  # [rows]
    weights: Tensor | None = None  # [rows, K], debug only
    logp: Tensor | None = None  # [rows, K], debug only

    @classmethod
    def zeros(cls, rows: int, k: int, feature_dim: int, device=None,
              debug: bool = False) -> "StepRecord":
        """All zero (``soft`` False): what an engine fills in for its live rows."""
        widths = {None: (), "k": (k,), "f": (feature_dim,)}
        made = {f.name: torch.zeros((rows,) + widths[f.metadata["width"]],
                                    dtype=f.metadata["dtype"], device=device)
                for f in fields(cls) if f.metadata}
        if debug:
            made["weights"] = torch.zeros(rows, k, device=device)
            made["logp"] = torch.zeros(rows, k, device=device)
        return cls(**made)

    @property
    def tokens(self) -> Tensor:
        """The emitted tokens ``[rows]`` (slot 0 of every record)."""
        return self.topk_ids[:, 0]

    def present(self) -> dict[str, Tensor]:
        """Every field that holds a tensor, by name (the record fields, ``loglik``, and the debug
        fields when made)."""
        return {f.name: getattr(self, f.name) for f in fields(self)
                if getattr(self, f.name) is not None}


class TraceRecorder:
    """Accumulates batched per-step records ``[B, ...]`` during decoding, one call per step.

    :meth:`build` slices row i to its own length and returns one :class:`SoftTrace` per row.
    Tensors are moved to the CPU once, at the end.
    """

    def __init__(self):
        self._steps: dict[str, list[Tensor]] = {key: [] for key in TRACE_KEYS}

    def __len__(self) -> int:
        return len(self._steps["topk_ids"])

    def record(self, step: RecordFields) -> None:
        """One batched step (every row's record fields)."""
        for key, value in step.record_fields().items():
            self._steps[key].append(value.detach())

    def build(self, lengths: Sequence[int], rows: Sequence[int] | None = None) -> list[SoftTrace]:
        """One trace per row (``rows`` selects/reorders them), trace i cut to ``lengths[i]``."""
        if not len(self):
            raise ValueError("TraceRecorder.build: nothing was recorded")
        stacked = {key: torch.stack(v, dim=1).cpu() for key, v in self._steps.items()}
        rows = range(stacked["topk_ids"].shape[0]) if rows is None else rows
        return [SoftTrace(*(stacked[key][r, : int(n)] for key in TRACE_KEYS))
                for r, n in zip(rows, lengths)]


def collate_traces(traces: Sequence[SoftTrace], length: int | None = None,
                   device=None) -> dict[str, Tensor]:
    """Right-pad traces into ``[B, R, ...]`` tensors aligned with verl's response positions.

    Step t of trace i lands at response position t. Padding is zeros (``soft=False``) and
    ``trace_mask`` [B, R] marks real steps. ``length`` defaults to the longest trace; a trace
    longer than ``length`` raises (nothing is silently dropped).
    Keys: ``trace_<key>`` for every record field, plus ``trace_mask``.
    """
    if not traces:
        raise ValueError("collate_traces needs at least one trace")
    k, f = traces[0].k, traces[0].feature_dim
    for i, t in enumerate(traces):
        if t.k != k or t.feature_dim != f:
            raise ValueError(f"collate_traces: trace {i} has K={t.k}, F={t.feature_dim}; "
                             f"trace 0 has K={k}, F={f}")
    r = max(len(t) for t in traces) if length is None else length
    too_long = [i for i, t in enumerate(traces) if len(t) > r]
    if too_long:
        raise ValueError(f"collate_traces: traces {too_long} are longer than length={r}")
    b = len(traces)
    out = {TRACE_PREFIX + key: torch.zeros((b, r) + tuple(getattr(traces[0], key).shape[1:]),
                                           dtype=_DTYPES[key]) for key in TRACE_KEYS}
    out[TRACE_PREFIX + "mask"] = torch.zeros(b, r, dtype=torch.bool)
    for i, t in enumerate(traces):
        n = len(t)
        for key in TRACE_KEYS:
            out[TRACE_PREFIX + key][i, :n] = getattr(t, key)
        out[TRACE_PREFIX + "mask"][i, :n] = True
    if device is not None:
        out = {key: v.to(device) for key, v in out.items()}
    return out


def uncollate_traces(batch: dict[str, Tensor]) -> list[SoftTrace]:
    """Inverse of :func:`collate_traces` (uses ``trace_mask``; real steps must be a prefix)."""
    mask = batch[TRACE_PREFIX + "mask"].bool().cpu()
    lengths = mask.sum(-1)
    if not torch.equal(mask, torch.arange(mask.shape[1]) < lengths[:, None]):
        raise ValueError("uncollate_traces: trace_mask is not a right-padded prefix mask")
    return [SoftTrace(*(batch[TRACE_PREFIX + key][i, : int(n)].cpu() for key in TRACE_KEYS))
            for i, n in enumerate(lengths)]
