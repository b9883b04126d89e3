"""Drive the SGLang-side soft sampler (:meth:`SoftRuntime.sample`) the way SGLang's scheduler
does, and check that it never waits for the device.

Under overlap scheduling SGLang launches batch t's forward and sampling, then processes batch
t-1 while the device works; a sampler that reads the device on the host (``.item()``,
``.tolist()``, ``bool(t)``, ``nonzero``, a blocking copy either way) waits for the forward there
and the overlap is lost. Two checks, one harness:

* ``device="cuda"``: every ``sample`` call runs under ``torch.cuda.set_sync_debug_mode("error")``,
  which raises on any synchronising op (the GPU kit's stage f, part ``sync``);
* ``device="meta"`` (the CPU): meta tensors have no values, so every host read of the device
  raises, and so does a blocking copy from the host to the device (``.to(device)`` or
  ``torch.tensor(..., device=...)``, which synchronise the stream on CUDA;
  ``slots.to_device`` copies without blocking). The records' non-blocking copy to the host
  (``records.PackedRows``) is the one read replaced here. Indexing a device tensor with a Python list
  builds the index on the device unseen here; on CUDA that is a blocking copy, which the CUDA
  check catches.

The batches: a prefill (extend) batch with a chunked row, two sampling settings (two groups),
decode batches of both settings (the host path) and, once the second setting's request left,
of one (the decode path, slots on the device, through the sampler's graphs where ``graphs``),
a request joining later, one leaving.
"""
from __future__ import annotations

import contextlib
from types import SimpleNamespace

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from soft_spatial.compat.torch import refuse_tensor_to_device
from soft_spatial.engines.sglang import runtime as rt_mod
from soft_spatial.engines.sglang.client import PARAM_KEY, request_params
from soft_spatial.engines.sglang.records import RECORD_KEY
from soft_spatial.engines.sglang.server_args import SchedulerSetup
from soft_spatial.softthink import SamplingConfig, SoftThinkingConfig
from soft_spatial.softthink.settings import SoftSettings

VOCAB, HIDDEN, THINK_END, POOL_ROWS = 97, 16, 5, 9  # slots 1..8, row 0 the padding row


def _req(rid: str, seed: int, sampling: SamplingConfig, slot: int):
    sp = SimpleNamespace(custom_params={PARAM_KEY: request_params(seed, sampling)},
                         temperature=sampling.temperature, top_k=sampling.top_k or -1,
                         top_p=sampling.top_p)
    return SimpleNamespace(rid=rid, output_ids=[], is_chunked=0, sampling_params=sp,
                           req_pool_idx=slot)


class _PackedRowsOnMeta:
    """``PackedRows`` for meta tensors: keeps the row count (there are no values to copy)."""

    def __init__(self, packed):
        self.rows = packed.shape[0]

    def __len__(self):
        return self.rows


class _NoBlockingHostToDevice(TorchDispatchMode):
    """Raises on a blocking copy from the host to the (meta) device."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.ops.aten._to_copy.default:
            src, dst, non_blocking = args[0], kwargs.get("device"), kwargs.get("non_blocking")
        elif func is torch.ops.aten.copy_.default:
            src, dst = args[1], args[0].device
            non_blocking = args[2] if len(args) > 2 else kwargs.get("non_blocking")
        else:
            return func(*args, **kwargs)
        if src.device.type == "cpu" and dst is not None and torch.device(dst).type != "cpu" \
                and not non_blocking:
            raise RuntimeError(f"{func}: a blocking host-to-device copy in the sampler "
                               f"(slots.to_device copies without blocking)")
        return func(*args, **kwargs)


@contextlib.contextmanager
def _meta_checks():
    packed_rows = rt_mod.PackedRows
    rt_mod.PackedRows = _PackedRowsOnMeta
    try:
        with refuse_tensor_to_device("torch.tensor(..., device=...) in the sampler: a blocking "
                                     "host-to-device copy (slots.to_device copies without "
                                     "blocking)"), _NoBlockingHostToDevice():
            yield
    finally:
        rt_mod.PackedRows = packed_rows


@contextlib.contextmanager
def _cuda_checks():
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        yield
    finally:
        torch.cuda.set_sync_debug_mode("default")


def drive_sampler(device: str, mode: str, vocab: int = VOCAB, hidden: int = HIDDEN,
                  graphs: bool = False) -> int:
    """Run a short schedule of scheduler batches through the soft sampler on ``device``
    ("cuda" or "meta") in ``mode``, every ``sample`` call under the device's no-wait check
    (``graphs``: decode batches through captured sampler graphs, CUDA only; their capture is
    outside the check, which a capture's own synchronisation would trip); returns the number of
    rows sampled. Raises where the sampler waits for the device."""
    soft = SoftThinkingConfig(mode=mode)
    setup = SchedulerSetup(soft=SoftSettings(soft_thinking=soft, seed=0), hidden_size=hidden,
                           think_end_id=THINK_END if soft.is_soft else None,
                           banned_ids=[vocab - 1])
    runtime = rt_mod.SoftRuntime(setup)
    if graphs:
        runtime.use_graphs([1, 2, 4, 8])
    checks = _cuda_checks if device == "cuda" else _meta_checks
    g = torch.Generator().manual_seed(0)
    plain, picky = SamplingConfig(), SamplingConfig(top_k=7, top_p=0.9)
    a, b, c, d = (_req("a", 1, plain, 3), _req("b", 2, picky, 1), _req("c", 3, plain, 6),
                  _req("d", 4, plain, 8))
    c.is_chunked = 1  # its prefill goes on in the next batch
    schedule = [([a, b, c], True), ([c], True), ([a, b, c], False), ([d], True),
                ([b, c, d], False), ([c, d], False), ([c, d], False)]  # c's last chunk; d
    # joins; a leaves; b leaves (its slot freed: the settings left are one)
    rows = 0
    for t, (batch, extend) in enumerate(schedule):
        if t == 1:
            c.is_chunked = 0
        if t == 5:
            runtime.release(b)
        logits = torch.randn(len(batch), vocab, generator=g).to(device)
        h = torch.randn(len(batch), hidden, generator=g).to(device)
        slots = torch.tensor([r.req_pool_idx for r in batch]).to(device)
        if graphs and not extend and t == 5:  # capture the graph of this size, unchecked
            runtime.sample(batch, logits, h, pool_rows=POOL_ROWS, slots=slots)
        with checks():
            tokens, info = runtime.sample(batch, logits, h, pool_rows=POOL_ROWS, extend=extend,
                                          slots=None if extend else slots)
        if tuple(tokens.shape) != (len(batch),) or set(info) != {RECORD_KEY}:
            raise AssertionError(f"batch {t}: tokens {tuple(tokens.shape)}, info {sorted(info)}")
        # what SGLang reads afterwards, when it processes the batch (allowed to wait)
        if len(info[RECORD_KEY]) != len(batch):
            raise AssertionError(f"batch {t}: records of {len(info[RECORD_KEY])} rows")
        toks = tokens.tolist() if device != "meta" else [0] * len(batch)
        for req, tok in zip(batch, toks):
            if not req.is_chunked:
                req.output_ids.append(tok)
        rows += len(batch)
    expected = {"extend": 3, "mixed": 2, "graphed" if graphs else "eager": 2 + graphs}
    if dict(runtime.stats) != expected:
        raise AssertionError(f"the batches took {dict(runtime.stats)}, expected {expected}")
    return rows
