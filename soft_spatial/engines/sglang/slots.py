"""The soft sampler's state per request-pool slot, on the device (no sglang import).

SGLang gives every running request a slot of its request pool (``Req.req_pool_idx``) and hands
each batch its rows' slots as one device tensor (``req_pool_indices``). What the sampler needs
of a request from one step to the next lives in :class:`SlotTable`, indexed by that tensor:

=============  =========  ===============================================================
column         shape      what
=============  =========  ===============================================================
``ids``        [rows, K]  the next decode step's input candidates (int64)
``weights``    [rows, K]  their mixture weights (fp32): softmax(z/τ) after a soft step,
                          one-hot on the token after a discrete one
``thinking``   [rows]     whether the request still thinks (its steps are soft)
``seed_mix``   [rows]     its noise seed, premixed (``noise.premix_seed``: the first link
                          of the noise hash, computed once per request)
``step``       [rows]     its next noise step (advanced on the device by every step;
                          -1 until a request is started in the slot)
=============  =========  ===============================================================

A request's columns are written once, when it is first sampled or prefilled again (an extend
batch: the host's one pass over rows, :meth:`SlotTable.start`), then only on the device. So a
decode step reads and writes them by the batch's slot tensor, with no host value per row, and the
same ops run eagerly or inside a captured CUDA graph (the table never moves once sized from the
pool: a graph keeps its addresses). Row 0 is SGLang's padding row: padded graph rows read and
write it, never a request.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from soft_spatial.softthink import soft_embedding
from soft_spatial.softthink.noise import premix_seed, seed_tensor

__all__ = ["SlotTable", "to_device"]


def to_device(values, device, dtype=torch.long) -> Tensor:
    """Host values (a list or a CPU tensor) as a tensor on ``device`` without waiting for the
    device: on CUDA through pinned memory and a non-blocking copy (a plain host-to-device copy
    synchronises the stream, i.e. waits for the forward just launched)."""
    device = torch.device(device)
    t = values if isinstance(values, Tensor) else torch.tensor(values, dtype=dtype)
    return (t.pin_memory() if device.type == "cuda" else t).to(device, non_blocking=True)


class SlotTable:
    """Per-slot sampler state of ``size`` request-pool rows (module docstring). ``fixed``: sized
    from SGLang's pool (never reallocated); else grown on demand (tests, stand-ins)."""

    def __init__(self, size: int, k: int, device, fixed: bool = False):
        self.size, self.k, self.fixed = int(size), int(k), fixed
        self.ids = torch.zeros(self.size, self.k, dtype=torch.long, device=device)
        self.weights = torch.zeros(self.size, self.k, dtype=torch.float32, device=device)
        self.thinking = torch.zeros(self.size, dtype=torch.bool, device=device)
        self.seed_mix = torch.zeros(self.size, dtype=torch.long, device=device)
        self.step = torch.full((self.size,), -1, dtype=torch.long, device=device)

    @property
    def device(self) -> torch.device:
        return self.ids.device

    def columns(self) -> dict[str, Tensor]:
        return {"ids": self.ids, "weights": self.weights, "thinking": self.thinking,
                "seed_mix": self.seed_mix, "step": self.step}

    def grown(self, size: int) -> "SlotTable":
        """A larger table holding this one's rows (tests and stand-ins: a table sized from the
        pool never grows)."""
        new = SlotTable(size, self.k, self.device)
        for name, col in self.columns().items():
            getattr(new, name)[: self.size] = col
        return new

    def index(self, slots: Sequence[int]) -> Tensor:
        """The device index of host ``slots`` (checked against the table's rows)."""
        bad = [s for s in slots if not 0 <= s < self.size]
        if bad:
            raise IndexError(f"soft sampler: request-pool slot {bad[0]} outside the pool's "
                             f"{self.size} rows")
        return to_device(list(slots), self.device)

    def start(self, slots: Sequence[int], seeds: Sequence[int], steps: Sequence[int],
              thinking: Sequence[bool]) -> Tensor:
        """Requests (re)start in ``slots`` (host values, one per request): their seeds, their next
        noise steps and whether they think. Returns the slots' device index."""
        idx = self.index(slots)
        self.seed_mix[idx] = premix_seed(to_device(seed_tensor(seeds), self.device))
        self.step[idx] = to_device(list(steps), self.device)
        self.thinking[idx] = to_device(list(thinking), self.device, torch.bool)
        return idx

    def mixture(self, slots: Tensor, embed: Callable[[Tensor], Tensor]) -> Tensor:
        """Σ_k w_k E[ids_k] ``[b, D]`` of the slots ``[b]`` (the same arithmetic as
        :func:`~soft_spatial.softthink.record_input_embeddings`, in the embedding's dtype).
        Every row takes the same ops — no branch on values, no host sync — so it can run while
        a CUDA graph is captured."""
        ids, w = self.ids[slots], self.weights[slots]
        b, k = ids.shape
        table = embed(ids.reshape(-1))  # [b*K, D] = E[ids]
        local = torch.arange(b * k, device=table.device).view(b, k)
        return soft_embedding(table, local, w.to(table.device))
