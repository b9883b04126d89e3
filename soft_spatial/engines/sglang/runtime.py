"""Scheduler-side soft decoding for SGLang, with no sglang import (runs on CPU with fakes).

One :class:`SoftRuntime` lives in each scheduler (TP worker) process. SGLang calls it twice per
step through the hooks of :mod:`.hooks`:

* :meth:`SoftRuntime.sample` from the ``soft_gumbel`` sampler, with the batch's ``Req`` objects
  (from :func:`current_batch`, set around ``TpModelWorker.forward_batch_generation``), the logits
  and the last hidden states. Each request's state lives on its ``Req`` (attribute
  :data:`STATE_ATTR`), so it follows the request through batch filtering/merging and disappears
  with it. The state holds the request's noise seed (the local engine's row seed) and its own
  count of steps sampled (not ``len(req.output_ids)``, which lags one step under overlap
  scheduling); each step's K+1 uniforms are :func:`~soft_spatial.softthink.noise.noise_uniforms` of
  (seed, step), as in the local engine. A request that SGLang prefills again after it sampled
  (retraction) is recognised by its extend batch and resumes at ``len(req.output_ids)``, or
  raises :class:`SoftStateError` after soft steps. Rows are grouped by their
  sampling settings and passed to :func:`~soft_spatial.engines.step.sample_step` (the same function
  the local engine calls), so the records are the local engine's records. The next step's input of
  every row — ids ``[K]`` and weights ``[K]`` (softmax(z/τ) at a soft step, one-hot on the token at
  a discrete one, :func:`~soft_spatial.softthink.record_weights`) — is written into
  :class:`DecodeInputBuffers` at the row's request-pool slot (``Req.req_pool_idx``), with
  whether the row still thinks. Nothing in it reads the device on the host: host values reach
  the device through :func:`to_device`, the records leave it by non-blocking copies
  (:class:`HostRecords`), read when SGLang processes the batch (docs/sglang.md, "Overlap
  scheduling").
* :meth:`SoftRuntime.decode_inputs` from the hook before the language model's forward at decode:
  Σ_k w_k E[ids_k] for every row of the batch, gathered from the buffers by the batch's
  request-pool indices, with the embedding rows that SGLang's own — possibly vocabulary-parallel —
  embedding module returns. A discrete row's one-hot weights give exactly its token's embedding.
  Static buffers indexed by pool slot, and no data-dependent branch in this read, are what a
  captured CUDA graph can replay (docs/sglang.md, "CUDA graphs").
"""
from __future__ import annotations

import contextlib
import threading
from collections import abc
from dataclasses import astuple, dataclass
from typing import Any
from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from soft_spatial.engines.step import sample_step
from soft_spatial.softthink import (AdaptSoft, AdaptSoftConfig, ControllerState, SamplingConfig,
                                    record_weights, soft_embedding)
from soft_spatial.softthink.noise import noise_uniforms, request_row_seed, seed_tensor

from soft_spatial.engines.sglang.client import INFO_KEYS, PARAM_KEY, info_key
from soft_spatial.engines.sglang.server_args import SchedulerSetup

__all__ = ["SoftRuntime", "RequestState", "BatchContext", "batch_context", "current_batch",
           "SoftStateError", "STATE_ATTR", "DecodeInputBuffers"]

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
    pool_rows: int | None = None  # rows of SGLang's request pool (size of the input buffers)


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
    """Per-request decoding state (lives on the Req). Host-side only: whether the request is
    still thinking lives on the device, per request-pool slot (:class:`DecodeInputBuffers`)."""

    __slots__ = ("seed", "steps", "first_soft", "sampling")

    def __init__(self, seed: int, sampling: SamplingConfig, thinking: bool, steps: int = 0):
        self.seed, self.sampling = int(seed), sampling
        self.steps = steps  # steps sampled: the next noise block's step (docs/design.md §2.2)
        # A step is soft exactly while the request thinks, and thinking only ever ends, so the
        # first soft step is the first one sampled, if the request starts out thinking.
        self.first_soft: int | None = steps if thinking else None

    @property
    def had_soft(self) -> bool:
        return self.first_soft is not None

    def rewind(self, steps: int) -> None:
        """Continue at step ``steps`` (a re-prefilled hard request): the noise is a function
        of (seed, step), so nothing else is replayed."""
        self.steps = steps

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


def to_device(values, device, dtype=torch.long) -> Tensor:
    """Host values (a list or a CPU tensor) as a tensor on ``device`` without waiting for the
    device: on CUDA through pinned memory and a non-blocking copy (a plain host-to-device copy
    synchronises the stream, i.e. waits for the forward just launched)."""
    device = torch.device(device)
    t = values if isinstance(values, Tensor) else torch.tensor(values, dtype=dtype)
    return (t.pin_memory() if device.type == "cuda" else t).to(device, non_blocking=True)


def scatter_rows(records: dict[str, Tensor], index: Tensor, rows: int) -> dict[str, Tensor]:
    """``records`` of ``len(index)`` rows placed at rows ``index`` of ``rows`` zero rows."""
    out = {}
    for key, v in records.items():
        out[key] = v.new_zeros((rows,) + tuple(v.shape[1:]))
        out[key][index] = v
    return out


class HostRecords:
    """One step's records of every batch row on the host, copied without blocking.

    The copies are queued on the device stream after the step's sampling; the first read waits
    for them (an event on CUDA). SGLang reads ``customized_info`` (``v[i]`` per request) when it
    processes the batch's results, by which time it has waited for the batch itself, so under
    overlap scheduling nothing in the sampler waits for the device."""

    def __init__(self, records: dict[str, Tensor]):
        self._host = {key: v.to("cpu", non_blocking=True, copy=True) for key, v in records.items()}
        self._event = None
        if any(v.is_cuda for v in records.values()):
            self._event = torch.cuda.Event()
            self._event.record()
        self._lists: dict[str, list] = {}

    def column(self, key: str) -> list:
        """Record ``key`` of every row, as Python values."""
        if key not in self._lists:
            if self._event is not None:
                self._event.synchronize()
                self._event = None
            self._lists[key] = self._host[key].tolist()
        return self._lists[key]


class RecordColumn(abc.Sequence):
    """``customized_info[info_key(key)]``: row ``i`` is the record of the batch's row ``i``
    (a list for vector keys), read from :class:`HostRecords` on first access."""

    __slots__ = ("_records", "_key")

    def __init__(self, records: HostRecords, key: str):
        self._records, self._key = records, key

    def __getitem__(self, i):
        return self._records.column(self._key)[i]

    def __len__(self) -> int:
        return len(self._records.column(self._key))

    def __eq__(self, other) -> bool:
        if isinstance(other, (list, RecordColumn)):
            return list(self) == list(other)
        return NotImplemented

    __hash__ = None

    def __repr__(self) -> str:
        return f"RecordColumn({self._key}: {self._records.column(self._key)!r})"


class DecodeInputBuffers:
    """The next decode step's inputs of every request-pool slot: ids ``[rows, K]`` and fp32
    weights ``[rows, K]``, written by the sampler after each step and read by the decode forward,
    and ``thinking [rows]`` (bool), whether the slot's request is still thinking (set when the
    request is first sampled, cleared by the sampler on the device when it emits the think-end
    token).

    Allocated once per device at the request pool's row count (the static buffers a captured CUDA
    graph reads; never reallocated once sized from the pool). Unwritten rows hold zeros, so a
    padded graph row reads a finite (zero, or a finished request's stale) mixture. ``owner`` is
    host-side: the request whose record each slot holds, checked before a decode batch runs.
    """

    def __init__(self, size: int, k: int, device, fixed: bool = False):
        self.size, self.k, self.fixed = int(size), int(k), fixed
        self.ids = torch.zeros(self.size, self.k, dtype=torch.long, device=device)
        self.weights = torch.zeros(self.size, self.k, dtype=torch.float32, device=device)
        self.thinking = torch.zeros(self.size, dtype=torch.bool, device=device)
        self.owner: list[Any] = [None] * self.size

    def index(self, slots: Sequence[int]) -> Tensor:
        """The device index of host ``slots`` (checked against the pool's rows)."""
        bad = [s for s in slots if not 0 <= s < self.size]
        if bad:
            raise IndexError(f"soft decode buffers: slot {bad[0]} outside the pool's "
                             f"{self.size} rows")
        return to_device(list(slots), self.ids.device)

    def write(self, slots: Sequence[int], ids: Tensor, weights: Tensor,
              owners: Sequence[Any] | None = None, index: Tensor | None = None) -> None:
        """Rows ``slots`` (host ints, ``n``; ``index``: the same on the device, if at hand) get
        ``ids [n, K]`` and ``weights [n, K]``."""
        idx = self.index(slots) if index is None else index
        self.ids[idx] = ids.to(self.ids.device)
        self.weights[idx] = weights.to(self.weights.device, torch.float32)
        for i, s in enumerate(slots):
            self.owner[s] = owners[i] if owners is not None else True

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
        self._banned: dict[Any, Tensor] = {}
        self._buffers: dict[str, DecodeInputBuffers] = {}

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

    def _controller_on(self, device) -> AdaptSoft | None:
        c = self.controller
        if c is not None and next(iter(c.parameters())).device != torch.device(device):
            self.controller = c = c.to(device, non_blocking=True)  # once, without waiting
        return c

    # -- per-request state --------------------------------------------------------------------
    def state(self, req) -> RequestState:
        """The request's state, made at its first sample (a Req that arrives with output, e.g.
        a new object for a request already under way, starts at its output length)."""
        st = getattr(req, STATE_ATTR, None)
        if st is None:
            custom = getattr(req.sampling_params, "custom_params", None) or {}
            params = custom.get(PARAM_KEY) if isinstance(custom, dict) else None
            seed = params["seed"] if params else request_row_seed(self.setup.soft.seed, req.rid)
            st = RequestState(seed, _sampling_from_req(req, params), self._thinking(req),
                              steps=len(req.output_ids))
            setattr(req, STATE_ATTR, st)
        return st

    def _thinking(self, req) -> bool:
        """Whether a request whose output so far is ``req.output_ids`` is still thinking."""
        end = self.setup.think_end_id
        return self.setup.soft.soft_thinking.is_soft and end not in req.output_ids

    def _align(self, st: RequestState, req, extend: bool) -> bool:
        """Check the request's step counter against SGLang's view of it; True when the request
        starts over (its thinking flag is then the one its output implies).

        In an extend (prefill) batch a request that already sampled was prefilled again
        (retraction): SGLang recomputes its KV from ``origin_input_ids + output_ids`` and drops
        what it had sampled since, so a hard request resumes at step ``len(output_ids)`` and a
        request with soft inputs raises. In a decode batch ``output_ids`` is ``steps`` long, or
        ``steps - 1`` under overlap scheduling (the previous batch's result is processed after
        this batch is launched); anything else is a bug."""
        t = len(req.output_ids)
        if extend and st.steps > 0:  # prefilled again after it sampled
            if st.had_soft:
                raise SoftStateError(
                    f"request {req.rid}: prefilled again at output length {t} after {st.steps} "
                    f"steps with soft inputs; SGLang re-prefilled it (retraction under KV-cache "
                    f"pressure?) and soft positions cannot be recomputed from token ids. Lower "
                    f"max_running_requests or raise gpu_memory_utilization.")
            st.rewind(t)
            return True
        if not extend and not st.steps - 1 <= t <= st.steps:
            raise RuntimeError(f"soft sampler: request {req.rid} has {t} output tokens after "
                               f"{st.steps} sampled steps")
        return False

    # -- sampling -----------------------------------------------------------------------------
    def _banned_ids(self, device) -> Tensor | None:
        if not self.setup.banned_ids:
            return None
        key = str(device)
        if key not in self._banned:
            self._banned[key] = to_device(self.setup.banned_ids, device)
        return self._banned[key]

    def buffers(self, device, pool_rows: int | None = None,
                min_size: int = 0) -> DecodeInputBuffers:
        """The decode-input buffers on ``device``: ``pool_rows`` rows when SGLang's request pool
        is known (:func:`~soft_spatial.compat.sglang.request_pool_rows`; allocated once, by the
        first caller — the sampler, or the embedding hook while SGLang captures its graphs —
        and never moved), else grown to hold ``min_size`` slots (tests, stand-ins)."""
        key = str(torch.device(device))
        buf = self._buffers.get(key)
        if buf is not None and (buf.fixed or buf.size >= max(min_size, pool_rows or 0)):
            return buf
        k = self.setup.soft.soft_thinking.top_k
        if pool_rows:
            new = DecodeInputBuffers(max(int(pool_rows), min_size), k, device, fixed=True)
        else:
            new = DecodeInputBuffers(max(min_size, 1), k, device)
        if buf is not None:  # grown: keep what was written
            new.write(list(range(buf.size)), buf.ids, buf.weights, buf.owner)
            new.thinking[: buf.size] = buf.thinking
        self._buffers[key] = new
        return new

    def check_decode_rows(self, reqs: Sequence[Any]) -> None:
        """Host-side check before a decode batch's forward (outside any graph): every row's
        request-pool slot holds this request's latest record (soft modes)."""
        if not self.setup.soft.soft_thinking.is_soft:
            return
        for req in reqs:
            slot, ok = req.req_pool_idx, False
            for buf in self._buffers.values():
                ok |= slot is not None and 0 <= slot < buf.size and buf.owner[slot] == req.rid
            if not ok:
                raise RuntimeError(f"soft decode: request {req.rid} (slot {slot}) has no record "
                                   f"from the soft sampler (is sampling_backend=soft_gumbel?)")

    @torch.no_grad()
    def sample(self, reqs: Sequence[Any], logits: Tensor, hidden: Tensor | None,
               pool_rows: int | None = None,
               extend: bool = False) -> tuple[Tensor, dict[str, RecordColumn]]:
        """One step for the batch rows ``reqs`` (logits ``[B, V]``, hidden ``[B, D]``).

        Returns the emitted tokens ``[B]`` (the spine at soft steps) and ``customized_info``:
        ``{"soft_<key>": column}`` for every record key and ``loglik``, row ``i`` of a column
        being row i's record (:class:`RecordColumn`, copied to the host without blocking). Rows
        of requests whose prefill is still chunked get the argmax token and a zero record
        (SGLang discards both); their state is untouched. In the soft modes each live row's next
        input, and whether it still thinks, are written to :meth:`buffers` (``pool_rows``: rows
        of SGLang's request pool) at ``req.req_pool_idx``. ``extend``: the batch is a prefill
        (extend) batch, not a decode batch.

        Nothing here reads the device on the host (host values go to the device through
        :func:`to_device`), so on CUDA the sampler only queues work behind the forward.
        """
        soft_thinking = self.setup.soft.soft_thinking
        k, is_soft = soft_thinking.top_k, soft_thinking.is_soft
        b, dev = logits.shape[0], logits.device
        if len(reqs) != b:
            raise ValueError(f"soft sampler: {len(reqs)} requests for {b} logit rows")
        if hidden is None and soft_thinking.mode == "adaptsoft":
            raise RuntimeError("soft sampler: AdaptSoft needs the last hidden states")
        banned = self._banned_ids(dev)
        if banned is not None:
            logits = logits.index_fill(-1, banned, float("-inf"))
        live: list[int] = []  # batch rows that sample (not a chunked prefill)
        states: list[RequestState] = []
        started: list[int] = []  # positions in ``live`` whose thinking flag is (re)set here
        for i, req in enumerate(reqs):
            if getattr(req, "is_chunked", 0) > 0:
                continue
            new = getattr(req, STATE_ATTR, None) is None
            st = self.state(req)
            if self._align(st, req, extend) or new:
                started.append(len(live))
            live.append(i)
            states.append(st)
        n = len(live)
        every = n == b
        idx = None if every else to_device(live, dev)
        lg = logits if every else logits[idx]
        h = hidden if every or hidden is None else hidden[idx]
        if h is None:
            h = torch.zeros(n, self.setup.hidden_size, device=dev)
        # each live row's K+1 uniforms: a function of (seed, step) only (docs/design.md §2.2)
        u = noise_uniforms(to_device(seed_tensor([st.seed for st in states]), dev),
                           to_device([st.steps for st in states], dev), k + 1)
        for st in states:
            st.steps += 1
        slots = [int(reqs[i].req_pool_idx) for i in live] if is_soft and n else []
        buf = slot_idx = None
        if slots:
            buf = self.buffers(dev, pool_rows, max(slots) + 1)
            slot_idx = buf.index(slots)
            if started:
                first = [slots[p] for p in started]
                buf.thinking[buf.index(first)] = to_device(
                    [self._thinking(reqs[live[p]]) for p in started], dev, torch.bool)
            thinking = buf.thinking[slot_idx]
        else:
            thinking = torch.zeros(n, dtype=torch.bool, device=dev)
        rec = self._sample_groups(states, lg, h, u, thinking, dev)
        if buf is not None:
            end = self.setup.think_end_id
            if end is not None:  # the </think> step itself was soft
                buf.thinking[slot_idx] = thinking & (rec["topk_ids"][:, 0] != end)
            buf.write(slots, rec["topk_ids"],
                      record_weights(rec["scores"], rec["tau"], rec["soft"]),
                      [reqs[i].rid for i in live], index=slot_idx)
        if not every:  # chunked rows: the argmax token and a zero record
            rec = scatter_rows(rec, idx, b)
            sampled = set(live)
            chunked = to_device([i for i in range(b) if i not in sampled], dev)
            rec["topk_ids"][chunked, 0] = logits[chunked].argmax(-1)
        host = HostRecords({key: rec[key] for key in INFO_KEYS})
        info = {info_key(key): RecordColumn(host, key) for key in INFO_KEYS}
        return rec["topk_ids"][:, 0].clone(), info

    def _sample_groups(self, states: Sequence[RequestState], logits: Tensor, h: Tensor,
                       u: Tensor, thinking: Tensor, dev) -> dict[str, Tensor]:
        """:func:`~soft_spatial.engines.step.sample_step` for the live rows, one call per
        distinct sampling setting (one call in the usual case of a single setting)."""
        soft_thinking, fdim = self.setup.soft.soft_thinking, self.feature_dim
        density = self.setup.soft.density  # what the actor replays with: rollout = replay
        controller = self._controller_on(dev)
        groups: dict[tuple, list[int]] = {}
        for i, st in enumerate(states):
            groups.setdefault(astuple(st.sampling), []).append(i)
        if len(groups) <= 1:
            sampling = states[0].sampling if states else SamplingConfig()
            return sample_step(logits, h, u, thinking, soft_thinking, sampling, controller, fdim,
                               density=density)
        idxs, recs = [], []
        for rows in groups.values():
            idx = to_device(rows, dev)
            idxs.append(idx)
            recs.append(sample_step(logits[idx], h[idx], u[idx], thinking[idx], soft_thinking,
                                    states[rows[0]].sampling, controller, fdim, density=density))
        return scatter_rows({key: torch.cat([r[key] for r in recs]) for key in recs[0]},
                            torch.cat(idxs), len(states))

    # -- decode inputs ------------------------------------------------------------------------
    @torch.no_grad()
    def decode_inputs(self, slots: Tensor, embed: Callable[[Tensor], Tensor],
                      input_embeds: Tensor, pool_rows: int | None = None) -> Tensor | None:
        """Decode-step input embeddings ``[B, D]`` of the rows in request-pool ``slots [B]``, or
        None in hard mode (plain token embeddings). ``embed`` maps ids ``[N]`` to full embedding
        rows ``[N, D]`` (SGLang's embedding module, which all-reduces its vocabulary shards).

        Safe inside a captured CUDA graph: it reads only server-wide settings, the static
        buffers (allocated here from ``pool_rows`` when SGLang captures before any sampling)
        and ``slots`` (the graph runner's static ``req_pool_indices``); no branch on values, no
        host sync. Whether the rows hold records is checked before the forward
        (:meth:`check_decode_rows`)."""
        if not self.setup.soft.soft_thinking.is_soft:
            return None
        if slots.shape[0] != input_embeds.shape[0]:
            raise ValueError(f"soft decode: {slots.shape[0]} request slots for "
                             f"{input_embeds.shape[0]} input rows")
        key = str(input_embeds.device)
        if pool_rows is None and key not in self._buffers:
            raise RuntimeError("soft decode: a decode row has no record from the soft sampler "
                               "(is sampling_backend=soft_gumbel?)")
        if key not in self._buffers and input_embeds.is_cuda and \
                torch.cuda.is_current_stream_capturing():
            # allocated inside a capture, the zero-fill would be replayed every step
            raise RuntimeError("soft decode: the decode-input buffers must exist before a CUDA "
                               "graph is captured (SGLang's warm-up forwards allocate them)")
        buf = self.buffers(input_embeds.device, pool_rows)
        return buf.mixture(slots, embed).to(input_embeds.dtype)


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


__all__.append("last_hidden")
