"""The per-step records on their way from SGLang's scheduler to the server: one packed row per
request and step (no sglang import).

A decode step's records of every batch row leave the device as **one** int32 tensor
``[rows, W]`` (:func:`pack`), copied to the host **once**, without blocking
(:class:`PackedRows`), and reach SGLang as **one** ``customized_info`` key (:data:`RECORD_KEY`)
whose item ``i`` is row ``i``'s record as ``bytes`` (``4·W``). SGLang appends that item to the
request's list at every step and streams slices of the list to the server; bytes are immutable
(SGLang's copy-on-collect keeps them as they are), hold no references (the garbage collector
never scans them) and pickle as one buffer. The server joins a request's rows once, when it
ends, and reads them back (:func:`unpack`).

A row, in int32 words (floats by their bit pattern, so every value crosses exactly, ids
included; ``K`` candidates, ``F`` controller features):

======  ======  =====================================================================
words   field   what
======  ======  =====================================================================
0       layout  ``K | F << 16``: how to read the row (checked against every other row)
1       step    the noise step the row was sampled at (a request's are 0, 1, 2, ...:
                checked when it ends, :func:`unpack`)
2..     the record fields of :class:`~soft_spatial.softthink.trace.SoftTrace`, in its order
        (``topk_ids [K]``, ``scores [K]``, ``tau``, ``u``, ``ctrl_x [F]``, ``entropy``, ``soft``)
last    loglik  the step's likelihood under the rollout policy
======  ======  =====================================================================
"""
from __future__ import annotations

from collections import abc
from dataclasses import dataclass, fields
from collections.abc import Sequence

import torch
from torch import Tensor

from soft_spatial.softthink.trace import TRACE_KEYS, SoftTrace, StepRecord

__all__ = ["RECORD_KEY", "RecordLayout", "pack", "PackedRows", "unpack", "step_records",
           "RecordsError"]

#: the one ``customized_info`` key the plugin's records travel under
RECORD_KEY = "soft_records"

_WIDTHS = {f.name: f.metadata["width"] for f in fields(SoftTrace)}
_DTYPES = {f.name: f.metadata["dtype"] for f in fields(SoftTrace)}


class RecordsError(RuntimeError):
    """A request's records are not the ones its tokens were sampled with (missing rows, another
    layout, steps out of order): the server refuses them, naming the request."""


@dataclass(frozen=True)
class RecordLayout:
    """Where each field lives in a packed row of ``k`` candidates and ``f`` controller
    features (module docstring)."""

    k: int
    f: int

    def __post_init__(self):
        if not (0 < self.k < 1 << 16 and 0 <= self.f < 1 << 15):
            raise ValueError(f"records: K={self.k}, F={self.f} do not fit a row's layout word")

    @property
    def word(self) -> int:
        return self.k | self.f << 16

    @classmethod
    def from_word(cls, word: int) -> "RecordLayout":
        return cls(word & 0xFFFF, word >> 16)

    def width_of(self, name: str) -> int:
        return {None: 1, "k": self.k, "f": self.f}[_WIDTHS[name]]

    @property
    def columns(self) -> dict[str, slice]:
        """Each field's columns (the header's two words first, ``loglik`` last)."""
        out, at = {"layout": slice(0, 1), "step": slice(1, 2)}, 2
        for name in TRACE_KEYS:
            out[name] = slice(at, at + self.width_of(name))
            at += self.width_of(name)
        out["loglik"] = slice(at, at + 1)
        return out

    @property
    def width(self) -> int:
        return 2 + sum(self.width_of(n) for n in TRACE_KEYS) + 1


def _words(t: Tensor) -> Tensor:
    """A record field ``[rows]`` or ``[rows, w]`` as int32 words ``[rows, w]``: fp32 by its bits
    (a view, no op), integers and flags by value."""
    t = t if t.dim() == 2 else t[:, None]
    return t.view(torch.int32) if t.dtype == torch.float32 else t.to(torch.int32)


def pack(rec: StepRecord, step: Tensor, header: Tensor) -> Tensor:
    """One step's records ``rec`` (``[rows, ...]``) as packed rows ``[rows, W]`` int32, in one
    concatenation; ``step [rows]`` the noise step of each row, ``header [rows, 1]`` int32 the
    layout word (a constant the caller keeps)."""
    parts = [header, _words(step)]
    parts += [_words(value) for value in rec.record_fields().values()]
    parts.append(_words(rec.loglik.float()))
    return torch.cat(parts, dim=1)


class PackedRows(abc.Sequence):
    """``customized_info[RECORD_KEY]`` of one step: item ``i`` is batch row ``i``'s packed record
    as ``bytes``.

    The device-to-host copy is queued when the step is sampled (non-blocking; on CUDA into pinned
    memory, with an event); the first read waits for it. SGLang reads the items when it
    processes the batch, by which time it has waited for the batch itself, so under overlap
    scheduling the sampler never waits for the device."""

    __slots__ = ("_host", "_event", "_rows")

    def __init__(self, packed: Tensor):
        self._host = packed.to("cpu", non_blocking=True, copy=True)
        self._event = None
        if packed.is_cuda:
            self._event = torch.cuda.Event()
            self._event.record()
        self._rows: list[bytes] | None = None

    def _split(self) -> list[bytes]:
        """Every row's bytes, once: the copy waited for, the rows cut in C (numpy's ``V``
        records read back as ``bytes``), no Python loop over them."""
        if self._event is not None:
            self._event.synchronize()
            self._event = None
        rows = self._host.numpy()
        self._rows = rows.view(f"V{rows.shape[1] * 4}").ravel().tolist()
        return self._rows

    def __getitem__(self, i):  # SGLang reads row i of every request, in its own loop
        rows = self._rows
        return (rows if rows is not None else self._split())[i]

    def __len__(self) -> int:
        return self._host.shape[0]

    def __repr__(self) -> str:
        return f"PackedRows({len(self)} rows of {4 * self._host.shape[1]} bytes)"


def unpack(rows: Sequence[bytes], what: str = "a request") -> tuple[dict[str, list], list[float]]:
    """A request's packed rows, in step order → (the ``SoftTrace.to_lists()`` dict, the per-step
    log-likelihoods). Refuses (:class:`RecordsError`, naming ``what``) rows of mixed layouts or
    lengths, and steps that are not 0, 1, 2, ... (a row sampled with another request's state or
    at the wrong noise step)."""
    if not rows:
        raise RecordsError(f"{what}: no records")
    width = len(rows[0])
    if width % 4 or any(len(r) != width for r in rows):
        raise RecordsError(f"{what}: packed records of {sorted({len(r) for r in rows})} bytes "
                           f"(one width expected)")
    words = torch.frombuffer(bytearray(b"".join(rows)), dtype=torch.int32).view(len(rows), -1)
    word = int(words[0, 0])
    layout = RecordLayout.from_word(word)
    if layout.width != words.shape[1] or not bool((words[:, 0] == word).all()):
        raise RecordsError(f"{what}: the records' layout words {sorted(set(words[:, 0].tolist()))} "
                           f"do not describe their {words.shape[1]}-word rows")
    cols = layout.columns
    steps = words[:, cols["step"]].squeeze(1)
    if not torch.equal(steps, torch.arange(len(rows), dtype=torch.int32)):
        bad = int((steps != torch.arange(len(rows), dtype=torch.int32)).nonzero()[0, 0])
        raise RecordsError(f"{what}: record {bad} was sampled at noise step {int(steps[bad])} "
                           f"(steps must run 0, 1, 2, ...: a request-pool slot read with "
                           f"another request's state, or a step counter out of line)")
    trace = {}
    for name in TRACE_KEYS:
        col = words[:, cols[name]]
        col = col.view(torch.float32) if _DTYPES[name] == torch.float32 else col.to(_DTYPES[name])
        trace[name] = (col if _WIDTHS[name] else col.squeeze(1)).tolist()
    return trace, words[:, cols["loglik"]].view(torch.float32).squeeze(1).tolist()


def step_records(rows: Sequence[bytes]) -> dict[str, Tensor]:
    """One step's packed rows of a batch (``customized_info[RECORD_KEY]``) → its records as
    tensors ``[rows, ...]``: every :data:`TRACE_KEYS` field in its dtype, ``loglik`` (fp32) and
    ``step`` (int64), as :func:`pack` received them. For tests and diagnostics; the server reads
    whole requests (:func:`unpack`)."""
    words = torch.frombuffer(bytearray(b"".join(rows[i] for i in range(len(rows)))),
                             dtype=torch.int32).view(len(rows), -1)
    cols = RecordLayout.from_word(int(words[0, 0])).columns
    out = {}
    for name in (*TRACE_KEYS, "loglik"):
        col = words[:, cols[name]]
        dtype = _DTYPES.get(name, torch.float32)
        col = col.view(torch.float32) if dtype == torch.float32 else col.to(dtype)
        out[name] = col if _WIDTHS.get(name) else col.squeeze(1)
    out["step"] = words[:, cols["step"]].squeeze(1).long()
    return out
