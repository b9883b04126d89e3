"""Scheduler-side soft decoding for SGLang, with no sglang import (runs on CPU with fakes).

One :class:`SoftRuntime` lives in each scheduler (TP worker) process. SGLang calls it twice per
step through the hooks of :mod:`.hooks`:

* :meth:`SoftRuntime.sample` from the ``soft_gumbel`` sampler, with the batch's ``Req`` objects
  and their request-pool slots (``req_pool_indices``, a device tensor; from
  :func:`current_batch`, set around ``TpModelWorker.forward_batch_generation``), the logits and
  the last hidden states. It returns the emitted tokens and the step's records, packed
  (:mod:`.records`: one ``customized_info`` key, one copy to the host).

  A request's sampler state lives per slot on the device (:class:`~.slots.SlotTable`: its
  premixed noise seed, its next noise step, whether it thinks, its next input) and is written
  **once**, when the request is first sampled or prefilled again: an extend (prefill) batch,
  the one place the host passes over rows (:meth:`SoftRuntime._sample_rows`). What the host keeps
  of a request (:class:`RequestState`, on the ``Req``: its seed, sampling settings, first soft
  step) is fixed from then on. A **decode** step therefore does no host work per row: it
  gathers the slots' state, draws each row's K+1 uniforms
  (:func:`~soft_spatial.softthink.noise.step_uniforms` of its seed and step, as the local engine
  does; on a GPU one fused kernel, :mod:`.noise_kernel`), runs
  :func:`~soft_spatial.engines.step.sample_step` (the function the local engine calls, so the
  records are the local engine's), advances the steps and writes each row's next
  input (ids ``[K]`` and weights ``[K]``: softmax(z/τ) at a soft step, one-hot on the token at a
  discrete one, :func:`~soft_spatial.softthink.record_weights`) and thinking flag back, and packs
  the records — on a GPU as one captured CUDA graph per padded batch size
  (:class:`~.sampler_graph.SamplerGraphs`), else eagerly with the same ops. Rows of several
  sampling settings at once (the settings of the requests alive, learned when they start and,
  through SGLang's request pool, when they leave: :meth:`SoftRuntime.release`) take the host
  path, grouped by setting. Every way a step was taken is counted (:attr:`SoftRuntime.stats`).

  The safety nets the host checked at every step before are kept by events: a request
  prefilled again after soft steps (retraction) raises :class:`SoftStateError` when its extend
  batch comes; a hard one resumes at its output length; and every record carries the noise step
  it was drawn at, which the server checks when the request ends
  (:func:`~.records.unpack`: 0, 1, 2, ...), so a slot read with another request's state or a
  counter out of line fails loudly, naming the request. Nothing here reads the device on the
  host: host values reach the device through :func:`~.slots.to_device`, the records leave it
  by one non-blocking copy, read when SGLang processes the batch (docs/sglang.md, "Overlap
  scheduling").
* :meth:`SoftRuntime.decode_inputs` from the hook before the language model's forward at decode:
  Σ_k w_k E[ids_k] for every row of the batch, gathered from the slot table by the batch's
  request-pool indices, with the embedding rows that SGLang's own — possibly vocabulary-parallel —
  embedding module returns. A discrete row's one-hot weights give exactly its token's embedding.
  Static buffers indexed by pool slot, and no data-dependent branch in this read, are what a
  captured CUDA graph can replay (docs/sglang.md, "CUDA graphs").
"""
from __future__ import annotations

import contextlib
import threading
from collections import Counter
from dataclasses import astuple, dataclass
from typing import Any
from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from soft_spatial.compat.sglang import protect_soft_kv
from soft_spatial.engines.step import sample_step
from soft_spatial.softthink import (AdaptSoft, AdaptSoftConfig, ControllerState, SamplingConfig,
                                    record_weights)
from soft_spatial.softthink.noise import request_row_seed

from soft_spatial.engines.sglang.client import PARAM_KEY
from soft_spatial.engines.sglang.noise_kernel import slot_uniforms
from soft_spatial.engines.sglang.records import RECORD_KEY, PackedRows, RecordLayout, pack
from soft_spatial.engines.sglang.sampler_graph import SamplerGraphs
from soft_spatial.engines.sglang.server_args import SchedulerSetup
from soft_spatial.engines.sglang.slots import SlotTable, to_device

__all__ = ["SoftRuntime", "RequestState", "BatchContext", "batch_context", "current_batch",
           "SoftStateError", "STATE_ATTR", "SlotTable", "to_device", "last_hidden"]

STATE_ATTR = "_soft_spatial_state"
TOP_K_ALL = 1 << 30  # SGLang's "top-k off" value


class SoftStateError(RuntimeError):
    """A request's KV would have to be recomputed from token ids after soft steps (retraction
    or re-prefill): soft positions cannot be rebuilt that way."""


@dataclass
class BatchContext:
    """What the sampler and the embedding hook need to know about the running batch."""

    reqs: Sequence[Any]  # SGLang Req objects, in batch-row order
    is_decode: bool
    extend_seq_lens: Sequence[int] | None = None  # per row, extend batches only
    forced_capture: bool = False  # hidden states were captured for us only
    pool_rows: int | None = None  # rows of SGLang's request pool (size of the slot table)
    slots: Tensor | None = None  # the rows' request-pool slots on the device (req_pool_indices)


_local = threading.local()


@contextlib.contextmanager
def batch_context(ctx: BatchContext):
    prev = getattr(_local, "ctx", None)
    _local.ctx = ctx
    try:
        yield ctx
    finally:
        _local.ctx = prev


def current_batch() -> BatchContext | None:
    return getattr(_local, "ctx", None)


class RequestState:
    """What the host keeps of a request (on its Req), fixed once it is first sampled: its noise
    seed, its sampling settings (and their key), its first soft step. Its step counter and
    thinking flag live on the device, in its slot (:class:`~.slots.SlotTable`)."""

    __slots__ = ("seed", "sampling", "key", "first_soft", "alive")

    def __init__(self, seed: int, sampling: SamplingConfig, thinking: bool, steps: int = 0):
        self.seed, self.sampling, self.key = int(seed), sampling, astuple(sampling)
        # A step is soft exactly while the request thinks, and thinking only ever ends, so the
        # first soft step is the first one sampled, if the request starts out thinking.
        self.first_soft: int | None = steps if thinking else None
        self.alive = False  # counted among the running requests' sampling settings

    @property
    def had_soft(self) -> bool:
        return self.first_soft is not None

    def soft_kv(self, output_len: int) -> bool:
        """Whether the KV of the request's first ``output_len - 1`` output positions (what SGLang
        inserts into the radix cache with ``output_len`` tokens out) holds a position whose input
        was a soft mixture: the input of output position j is step j's record."""
        return self.first_soft is not None and output_len - 1 > self.first_soft


def _sampling_from_req(req, params: dict[str, Any] | None) -> SamplingConfig:
    if params is not None:
        return SamplingConfig(temperature=float(params["temperature"]), max_new_tokens=1,
                              top_k=int(params["top_k"]), top_p=float(params["top_p"]),
                              greedy=bool(params["greedy"]))
    sp = req.sampling_params  # SGLang normalises temperature 0 to (1.0, top_k=1)
    top_k = int(sp.top_k)
    return SamplingConfig(temperature=max(float(sp.temperature), 1e-5), max_new_tokens=1,
                          top_k=0 if top_k in (-1, TOP_K_ALL) or top_k <= 0 else top_k,
                          top_p=float(sp.top_p), greedy=top_k == 1)


class SoftRuntime:
    """Soft decoding state and computation of one scheduler process."""

    def __init__(self, setup: SchedulerSetup):
        self.setup = setup
        self.controller: AdaptSoft | None = None
        if setup.soft.soft_thinking.mode == "adaptsoft":
            self.controller = AdaptSoft.from_config(setup.soft.adaptsoft,
                                                    setup.hidden_size).float().eval()
        if setup.controller_path:
            ctrl = AdaptSoft.load(setup.controller_path)
            self.set_controller(ctrl.to_state())
        self.layout = RecordLayout(setup.soft.soft_thinking.top_k, self.feature_dim)
        self._banned: dict[str, Tensor] = {}
        self._headers: dict[str, list[Tensor]] = {}
        self._tables: dict[str, SlotTable] = {}
        self._alive: Counter = Counter()  # sampling key -> running requests started with it
        self._settings: dict[tuple, SamplingConfig] = {}
        self.graphs: SamplerGraphs | None = None
        #: how each sampled batch was taken: "graphed", "eager" (a decode batch without graphs),
        #: "extend", "mixed" (several sampling settings), "large" (above the largest graph)
        self.stats: Counter = Counter()
        #: the eager steps' path (``sample_step``'s ``own_path``, negated): None, each row its own
        #: path on a CPU and the device path elsewhere; True, the device path everywhere (what a
        #: graph captures: the CPU bench and the graph path's tests compare with it)
        self.device_path: bool | None = None

    # -- controller ---------------------------------------------------------------------------
    @property
    def feature_dim(self) -> int:
        return self.controller.feature_dim if self.controller else AdaptSoftConfig().proj_dim + 1

    def set_controller(self, state: ControllerState) -> None:
        """AdaptSoft's state from training (or from a checkpoint at start-up)."""
        ctrl = AdaptSoft.from_state(state, into=self.controller)
        if ctrl.hidden_size != self.setup.hidden_size:
            raise ValueError(f"AdaptSoft hidden size {ctrl.hidden_size} != policy hidden size "
                             f"{self.setup.hidden_size}")
        dev = next(iter(self.controller.parameters())).device if self.controller else "cpu"
        self.controller = ctrl.to(dev).float().eval()
        self._controller_changed()

    def _controller_on(self, device) -> AdaptSoft | None:
        c = self.controller
        if c is not None and next(iter(c.parameters())).device != torch.device(device):
            self.controller = c = c.to(device, non_blocking=True)  # once, without waiting
            self._controller_changed()
        return c

    def _controller_changed(self) -> None:
        """A captured step reads the controller's tensors by address and its settings as
        constants: a controller built anew or moved is captured again (weights loaded in place,
        as every training step's update is, keep the graphs); the records' layout follows the
        controller's feature width."""
        c = self.controller
        sig = None if c is None else (id(c), tuple((t.data_ptr(), tuple(t.shape)) for t in
                                                   (*c.parameters(), *c.buffers())))
        if getattr(self, "graphs", None) is not None and sig != getattr(self, "_ctrl_sig", sig):
            self.graphs.invalidate()
        self._ctrl_sig = sig
        if hasattr(self, "layout"):
            layout = RecordLayout(self.setup.soft.soft_thinking.top_k, self.feature_dim)
            if layout != self.layout:
                self.layout, self._headers = layout, {}

    # -- graphs -------------------------------------------------------------------------------
    def use_graphs(self, sizes: Sequence[int] | None, capture: bool = True) -> None:
        """Decode steps of up to ``max(sizes)`` rows as captured graphs padded to ``sizes``
        (SGLang's ``cuda_graph_bs``; None: none). ``capture=False`` runs the same static path
        without a graph (the CPU: tests and the CPU bench)."""
        self.graphs = SamplerGraphs(sizes, capture=capture) if sizes else None

    # -- per-request state --------------------------------------------------------------------
    def _thinking(self, req) -> bool:
        """Whether a request whose output so far is ``req.output_ids`` is still thinking."""
        end = self.setup.think_end_id
        return self.setup.soft.soft_thinking.is_soft and end not in req.output_ids

    def _new_state(self, req) -> RequestState:
        custom = getattr(req.sampling_params, "custom_params", None) or {}
        params = custom.get(PARAM_KEY) if isinstance(custom, dict) else None
        seed = params["seed"] if params else request_row_seed(self.setup.soft.seed, req.rid)
        st = RequestState(seed, _sampling_from_req(req, params), self._thinking(req),
                          steps=len(req.output_ids))
        setattr(req, STATE_ATTR, st)
        # asked when SGLang inserts the request into the radix tree, never before
        protect_soft_kv(req, lambda: st.soft_kv(len(req.output_ids)))
        return st

    def _restart(self, st: RequestState, req) -> None:
        """A request that already sampled is prefilled again (retraction): SGLang recomputes its
        KV from ``origin_input_ids + output_ids`` and drops what it had sampled since, so a hard
        request resumes at step ``len(output_ids)`` and a request with soft inputs raises."""
        if st.had_soft:
            raise SoftStateError(
                f"request {req.rid}: prefilled again at output length {len(req.output_ids)} "
                f"after steps with soft inputs; SGLang re-prefilled it (retraction under KV-cache "
                f"pressure?) and soft positions cannot be recomputed from token ids. Lower "
                f"max_running_requests or raise gpu_memory_utilization.")

    def _alive_add(self, st: RequestState) -> None:
        if not st.alive:
            st.alive = True
            self._alive[st.key] += 1
            self._settings[st.key] = st.sampling

    def release(self, req) -> None:
        """SGLang gives ``req``'s request-pool slot back (finished, aborted or retracted): its
        sampling settings no longer count among the running requests'."""
        st = getattr(req, STATE_ATTR, None)
        if st is not None and st.alive:
            st.alive = False
            self._alive[st.key] -= 1
            if self._alive[st.key] <= 0:
                del self._alive[st.key]

    def _one_setting(self) -> SamplingConfig | None:
        """The running requests' sampling settings if they share one, else None."""
        if len(self._alive) != 1:
            return None
        return self._settings[next(iter(self._alive))]

    # -- device tables ------------------------------------------------------------------------
    def _banned_ids(self, device) -> Tensor | None:
        if not self.setup.banned_ids:
            return None
        key = str(device)
        if key not in self._banned:
            self._banned[key] = to_device(self.setup.banned_ids, device)
        return self._banned[key]

    def _header(self, rows: int, device) -> Tensor:
        """The records' layout word ``[rows, 1]`` int32: a slice of a column kept for the
        runtime's life (a captured step reads it by address; a longer one is added beside it)."""
        key = str(device)
        cols = self._headers.setdefault(key, [])
        if not cols or cols[-1].shape[0] < rows:
            size = max(rows, 256, self.graphs.largest if self.graphs else 0)
            cols.append(torch.full((size, 1), self.layout.word, dtype=torch.int32,
                                   device=device))
        return cols[-1][:rows]

    def slot_table(self, device, pool_rows: int | None = None, min_size: int = 0) -> SlotTable:
        """The slot table on ``device``: ``pool_rows`` rows when SGLang's request pool is known
        (:func:`~soft_spatial.compat.sglang.request_pool_rows`; allocated once, by the first
        caller — the sampler, or the embedding hook while SGLang captures its graphs — and never
        moved), else grown to hold ``min_size`` slots (tests, stand-ins)."""
        key = str(torch.device(device))
        table = self._tables.get(key)
        if table is not None and (table.fixed or table.size >= max(min_size, pool_rows or 0)):
            return table
        k = self.setup.soft.soft_thinking.top_k
        if pool_rows:
            new = SlotTable(max(int(pool_rows), min_size), k, device, fixed=True)
            if table is not None:
                for name, col in table.columns().items():
                    getattr(new, name)[: table.size] = col
        else:
            new = table.grown(max(min_size, 1)) if table is not None else \
                SlotTable(max(min_size, 1), k, device)
        self._tables[key] = new
        return new

    # -- sampling -----------------------------------------------------------------------------
    @torch.no_grad()
    def sample(self, reqs: Sequence[Any], logits: Tensor, hidden: Tensor | None,
               pool_rows: int | None = None, extend: bool = False,
               slots: Tensor | None = None) -> tuple[Tensor, dict[str, PackedRows]]:
        """One step for the batch rows ``reqs`` (logits ``[B, V]``, hidden ``[B, D]``, the rows'
        request-pool ``slots [B]`` on the device: SGLang's ``req_pool_indices``; None: read from
        ``req.req_pool_idx``).

        Returns the emitted tokens ``[B]`` (the spine at soft steps) and ``customized_info``:
        ``{RECORD_KEY: rows}``, row ``i`` being batch row i's packed record (:mod:`.records`),
        copied to the host without blocking. Rows of requests whose prefill is still chunked get
        the argmax token and an all-zero record (SGLang discards both); their state is untouched.
        ``pool_rows``: rows of SGLang's request pool; ``extend``: the batch is a prefill (extend)
        batch, not a decode batch.

        Nothing here reads the device on the host, so on CUDA the sampler only queues work
        behind the forward; a decode batch passes over its rows on the host only when its
        requests do not share one sampling setting.
        """
        b, dev = logits.shape[0], logits.device
        if len(reqs) != b:
            raise ValueError(f"soft sampler: {len(reqs)} requests for {b} logit rows")
        if hidden is None and self.setup.soft.soft_thinking.mode == "adaptsoft":
            raise RuntimeError("soft sampler: AdaptSoft needs the last hidden states")
        sampling = None if extend or slots is None else self._one_setting()
        if sampling is None:
            self.stats["extend" if extend else "mixed"] += 1
            return self._sample_rows(reqs, logits, hidden, pool_rows, extend)
        table = self.slot_table(dev, pool_rows)
        if hidden is not None and self.controller is None:
            hidden = None  # only AdaptSoft reads them
        graphs = self.graphs
        if graphs is not None and graphs.size_for(b) is not None:
            self.stats["graphed"] += 1
            key = (id(table), sampling.temperature, sampling.top_k, sampling.top_p,
                   sampling.greedy)
            tokens, packed = graphs.run(
                key, lambda lg, h, s: self._body(lg, h, s, table, sampling, own_path=False),
                self._banned_ids(dev), logits, hidden, slots, self.layout.width)
            return tokens, {RECORD_KEY: PackedRows(packed)}
        self.stats["large" if graphs is not None else "eager"] += 1
        banned = self._banned_ids(dev)
        if banned is not None:
            logits = logits.index_fill(-1, banned, float("-inf"))
        tokens, packed = self._body(logits, hidden, slots, table, sampling, self._own_path)
        return tokens.clone(), {RECORD_KEY: PackedRows(packed)}

    @property
    def _own_path(self) -> bool | None:
        return None if self.device_path is None else not self.device_path

    def _body(self, logits: Tensor, hidden: Tensor | None, slots: Tensor, table: SlotTable,
              sampling: SamplingConfig, own_path: bool | None = None) -> tuple[Tensor, Tensor]:
        """The step's tensor work for rows in ``slots`` (logits already masked): draw, sample,
        write each slot's next state, pack the records. (tokens ``[b]``, packed ``[b, W]``)."""
        soft_thinking = self.setup.soft.soft_thinking
        u, step = slot_uniforms(table.seed_mix, table.step, slots, soft_thinking.top_k + 1)
        thinking = table.thinking[slots]
        rec = sample_step(logits, hidden, u, thinking, soft_thinking, sampling,
                          self._controller_on(logits.device), self.feature_dim,
                          density=self.setup.soft.density, own_path=own_path)
        tokens = rec.tokens
        if soft_thinking.is_soft:
            end = self.setup.think_end_id  # the </think> step itself was soft
            table.thinking[slots] = thinking & (tokens != end)
            table.ids[slots] = rec.topk_ids
            table.weights[slots] = record_weights(rec.scores, rec.tau, rec.soft)
        return tokens, pack(rec, step, self._header(logits.shape[0], logits.device))

    def _sample_rows(self, reqs: Sequence[Any], logits: Tensor, hidden: Tensor | None,
                     pool_rows: int | None, extend: bool) -> tuple[Tensor, dict[str, PackedRows]]:
        """The host path (extend batches; decode batches of several sampling settings): one pass
        over the rows starts new requests and restarts re-prefilled ones in their slots, then
        the live rows are sampled, one :meth:`_body` per sampling setting."""
        b, dev = logits.shape[0], logits.device
        live, groups, starts = [], {}, []
        for i, req in enumerate(reqs):
            if getattr(req, "is_chunked", 0) > 0:
                continue  # its prefill goes on: nothing sampled, nothing kept
            st = getattr(req, STATE_ATTR, None)
            if st is None:
                st = self._new_state(req)
                starts.append((req, st, len(req.output_ids)))
            elif extend:  # prefilled again after it sampled
                self._restart(st, req)
                starts.append((req, st, len(req.output_ids)))
            self._alive_add(st)
            groups.setdefault(st.key, (st.sampling, []))[1].append(len(live))
            live.append(i)
        slots_host = [int(reqs[i].req_pool_idx) for i in live]
        table = self.slot_table(dev, pool_rows, max(slots_host, default=-1) + 1)
        if starts:
            table.start([int(r.req_pool_idx) for r, _, _ in starts],
                        [st.seed for _, st, _ in starts], [n for _, _, n in starts],
                        [self._thinking(r) for r, _, _ in starts])
        banned = self._banned_ids(dev)
        if banned is not None:
            logits = logits.index_fill(-1, banned, float("-inf"))
        packed = torch.zeros(b, self.layout.width, dtype=torch.int32, device=dev)
        tokens = logits.argmax(-1)  # chunked rows: the argmax token (discarded by SGLang)
        if live:
            slots = table.index(slots_host)
            every = len(live) == b and len(groups) == 1
            for sampling, positions in groups.values():
                idx = None if every else to_device([live[p] for p in positions], dev)
                rows = slots if every else slots[to_device(positions, dev)]
                lg = logits if every else logits[idx]
                h = None if hidden is None or self.controller is None else (
                    hidden if every else hidden[idx])
                tok, part = self._body(lg, h, rows, table, sampling, self._own_path)
                if every:
                    tokens, packed = tok, part
                else:
                    tokens[idx], packed[idx] = tok, part
        return tokens.clone(), {RECORD_KEY: PackedRows(packed)}

    # -- decode inputs ------------------------------------------------------------------------
    @torch.no_grad()
    def decode_inputs(self, slots: Tensor, embed: Callable[[Tensor], Tensor],
                      input_embeds: Tensor, pool_rows: int | None = None) -> Tensor | None:
        """Decode-step input embeddings ``[B, D]`` of the rows in request-pool ``slots [B]``, or
        None in hard mode (plain token embeddings). ``embed`` maps ids ``[N]`` to full embedding
        rows ``[N, D]`` (SGLang's embedding module, which all-reduces its vocabulary shards).

        Safe inside a captured CUDA graph: it reads only server-wide settings, the slot table
        (allocated here from ``pool_rows`` when SGLang captures before any sampling) and
        ``slots`` (the graph runner's static ``req_pool_indices``); no branch on values, no host
        sync. That the rows hold this request's latest record is checked by the records' steps
        when the request ends (:func:`~.records.unpack`)."""
        if not self.setup.soft.soft_thinking.is_soft:
            return None
        if slots.shape[0] != input_embeds.shape[0]:
            raise ValueError(f"soft decode: {slots.shape[0]} request slots for "
                             f"{input_embeds.shape[0]} input rows")
        key = str(input_embeds.device)
        if pool_rows is None and key not in self._tables:
            raise RuntimeError("soft decode: a decode row has no record from the soft sampler "
                               "(is sampling_backend=soft_gumbel?)")
        if key not in self._tables and input_embeds.is_cuda and \
                torch.cuda.is_current_stream_capturing():
            # allocated inside a capture, the zero-fill would be replayed every step
            raise RuntimeError("soft decode: the slot table must exist before a CUDA graph is "
                               "captured (SGLang's warm-up forwards allocate it)")
        table = self.slot_table(input_embeds.device, pool_rows)
        return table.mixture(slots, embed).to(input_embeds.dtype)


def last_hidden(hidden: Tensor | None, ctx: BatchContext, rows: int) -> Tensor | None:
    """The last position's hidden state per row: SGLang returns ``[rows, D]`` with
    CaptureHiddenMode.LAST, every extend position with FULL (then take each row's last)."""
    if hidden is None or hidden.shape[0] == rows:
        return hidden
    if ctx.extend_seq_lens is None or len(ctx.extend_seq_lens) != rows:
        raise RuntimeError(f"soft sampler: {hidden.shape[0]} hidden rows for {rows} requests "
                           f"and no extend lengths")
    ends = torch.tensor(list(ctx.extend_seq_lens), device=hidden.device).cumsum(0) - 1
    return hidden[ends]
