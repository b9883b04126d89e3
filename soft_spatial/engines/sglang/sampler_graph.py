"""The soft sampler's decode step as one CUDA graph per padded batch size (no sglang import).

A decode step of the plugin is ~100 small tensor ops (the noise hash, the discrete and the soft
paths, the next inputs, the records' pack); launched one by one from the host they cost more than
stock SGLang's whole step. :class:`SamplerGraphs` captures them once per batch size of SGLang's
own graphs (``cuda_graph_bs``) and replays them: per step the host copies the batch's logits,
hidden states and request-pool slots into static buffers, pads the slots with SGLang's padding
row 0, replays, and reads the static outputs (the emitted tokens and the packed records) —
about ten launches where the eager step has a hundred.

It captures the eager kernels themselves (no compiler rewrite), so a replay computes exactly the
eager step's records; a step's state is read and written through the slot table, whose tensors
never move, and everything the graph reads (the controller's parameters, the banned ids) is
keyed into it: a controller of another shape or at other addresses recaptures
(:meth:`SamplerGraphs.invalidate`). The graphs share one private memory pool.

Batches the graphs do not take run eagerly, counted by the runtime: extend (prefill) batches,
chunked rows, rows of several sampling settings, more rows than the largest graph.

On a CPU there is nothing to capture; ``capture=False`` runs the same static-buffer path without
a graph (what the tests compare with the eager step, row for row).
"""
from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence

import torch
from torch import Tensor

__all__ = ["SamplerGraphs"]

#: what a decode step computes from its static inputs: (masked logits [bs, V], hidden [bs, D] or
#: None, slots [bs]) -> (tokens [bs], packed records [bs, W])
Body = Callable[[Tensor, "Tensor | None", Tensor], "tuple[Tensor, Tensor]"]


class _Static:
    """The static inputs and outputs of one (vocabulary, dtypes) combination, at the largest
    size; the graphs of every size read and write their leading rows."""

    def __init__(self, logits: Tensor, hidden: Tensor | None, size: int, width: int):
        dev = logits.device
        self.logits = torch.zeros(size, logits.shape[1], dtype=logits.dtype, device=dev)
        self.hidden = (None if hidden is None else
                       torch.zeros(size, hidden.shape[1], dtype=hidden.dtype, device=dev))
        self.slots = torch.zeros(size, dtype=torch.long, device=dev)
        self.tokens = torch.zeros(size, dtype=torch.long, device=dev)
        self.packed = torch.zeros(size, width, dtype=torch.int32, device=dev)
        self._views: dict[tuple[int, int], tuple] = {}

    def views(self, b: int, bs: int) -> tuple:
        """The leading ``b`` rows of each buffer and the padded rows ``b:bs`` of the slots, made
        once per (b, bs): a step dispatches no view op."""
        v = self._views.get((b, bs))
        if v is None:
            v = self._views[b, bs] = (
                self.logits[:b], None if self.hidden is None else self.hidden[:b],
                self.slots[:b], self.slots[b:bs] if bs > b else None, self.tokens[:b],
                self.packed[:b])
        return v


class SamplerGraphs:
    """Captured decode steps, one per padded batch size (module docstring).

    ``sizes``: the batch sizes to pad to (SGLang's ``cuda_graph_bs``); ``capture``: capture CUDA
    graphs (else run the static path without one: the CPU)."""

    def __init__(self, sizes: Sequence[int], capture: bool = True):
        self.sizes = sorted({int(s) for s in sizes if int(s) > 0})
        if not self.sizes:
            raise ValueError("sampler graphs: no batch size to capture")
        self.capture = capture
        self._graphs: dict[tuple, object] = {}
        self._static: dict[tuple, _Static] = {}
        self._pool = None
        self.replay = self._replay  # one place to observe a replay (scripts/bench_sampler.py)

    @property
    def largest(self) -> int:
        return self.sizes[-1]

    def size_for(self, rows: int) -> int | None:
        """The padded size of a batch of ``rows`` rows; None above the largest graph."""
        i = bisect.bisect_left(self.sizes, rows)
        return self.sizes[i] if i < len(self.sizes) else None

    def invalidate(self) -> None:
        """Forget every graph (the next step of each size captures again)."""
        self._graphs.clear()

    def wrap_replay(self, wrap: Callable[[Callable], Callable]) -> None:
        self.replay = wrap(self.replay)

    def _replay(self, graph) -> None:
        graph.replay() if self.capture else graph()

    def run(self, key: tuple, body: Body, banned: Tensor | None, logits: Tensor,
            hidden: Tensor | None, slots: Tensor, width: int) -> tuple[Tensor, Tensor]:
        """One decode step of ``b`` rows through the graph of its padded size: (tokens ``[b]``,
        packed records ``[b, W]``), both safe to keep (the next replay overwrites the static
        outputs: the tokens are copied, the records' host copy is queued first). ``key`` names
        what else the graph depends on (mode, sampling settings, controller)."""
        b, bs = logits.shape[0], self.size_for(logits.shape[0])
        if bs is None:
            raise ValueError(f"sampler graphs: {b} rows, the largest graph has {self.largest}")
        skey = (logits.shape[1], logits.dtype, None if hidden is None else
                (hidden.shape[1], hidden.dtype), width, str(logits.device))
        st = self._static.get(skey)
        if st is None:
            st = self._static[skey] = _Static(logits, hidden, self.largest, width)
        logits_b, hidden_b, slots_b, padded, tokens_b, packed_b = st.views(b, bs)
        logits_b.copy_(logits)
        if hidden is not None:
            hidden_b.copy_(hidden)
        slots_b.copy_(slots)
        if padded is not None:
            padded.zero_()  # padded rows: SGLang's padding row
        gkey = (key, skey, bs)
        graph = self._graphs.get(gkey)
        if graph is None:
            graph = self._graphs[gkey] = self._make(st, bs, body, banned)
        self.replay(graph)
        return tokens_b.clone(), packed_b

    def _make(self, st: _Static, bs: int, body: Body, banned: Tensor | None):
        def step():
            logits = st.logits[:bs]
            if banned is not None:
                logits.index_fill_(-1, banned, float("-inf"))
            tokens, packed = body(logits, None if st.hidden is None else st.hidden[:bs],
                                  st.slots[:bs])
            st.tokens[:bs].copy_(tokens)
            st.packed[:bs].copy_(packed)

        if not self.capture:
            return step
        # Warm up and capture on the padding row only: the warm-up runs the step for real (it
        # writes the state of the slots it reads), the capture records without running.
        real = st.slots[:bs].clone()
        st.slots[:bs].zero_()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):
                step()
        torch.cuda.current_stream().wait_stream(side)
        if self._pool is None:
            self._pool = torch.cuda.graph_pool_handle()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self._pool, capture_error_mode="thread_local"):
            step()
        st.slots[:bs].copy_(real)
        return graph
