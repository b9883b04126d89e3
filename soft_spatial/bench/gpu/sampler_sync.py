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
  ``runtime.to_device`` copies without blocking). The records' non-blocking copy to the host
  (``HostRecords``) is the one read replaced here. Indexing a device tensor with a Python list
  builds the index on the device unseen here; on CUDA that is a blocking copy, which the CUDA
  check catches.

The batches: a prefill (extend) batch with a chunked row, two sampling settings (two groups),
decode batches, a request joining later, one leaving.
"""
from __future__ import annotations

import contextlib
from types import SimpleNamespace

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from soft_spatial.compat.torch import refuse_tensor_to_device
from soft_spatial.engines.sglang import runtime as rt_mod
from soft_spatial.engines.sglang.client import INFO_KEYS, PARAM_KEY, info_key, request_params
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


class _HostRecordsOnMeta:
    """``HostRecords`` for meta tensors: keeps the shapes (there are no values to copy)."""

    def __init__(self, records):
        self.shapes = {key: tuple(v.shape) for key, v in records.items()}

    def column(self, key):
        return [None] * self.shapes[key][0]


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
                               f"(runtime.to_device copies without blocking)")
        return func(*args, **kwargs)


@contextlib.contextmanager
def _meta_checks():
    host_records = rt_mod.HostRecords
    rt_mod.HostRecords = _HostRecordsOnMeta
    try:
        with refuse_tensor_to_device("torch.tensor(..., device=...) in the sampler: a blocking "
                                     "host-to-device copy (runtime.to_device copies without "
                                     "blocking)"), _NoBlockingHostToDevice():
            yield
    finally:
        rt_mod.HostRecords = host_records


@contextlib.contextmanager
def _cuda_checks():
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        yield
    finally:
        torch.cuda.set_sync_debug_mode("default")


def drive_sampler(device: str, mode: str, vocab: int = VOCAB, hidden: int = HIDDEN) -> int:
    """Run a short schedule of scheduler batches through the soft sampler on ``device``
    ("cuda" or "meta") in ``mode``, every ``sample`` call under the device's no-wait check;
    returns the number of rows sampled. Raises where the sampler waits for the device."""
    soft = SoftThinkingConfig(mode=mode)
    setup = SchedulerSetup(soft=SoftSettings(soft_thinking=soft, seed=0), hidden_size=hidden,
                           think_end_id=THINK_END if soft.is_soft else None,
                           banned_ids=[vocab - 1])
    runtime = rt_mod.SoftRuntime(setup)
    checks = _cuda_checks if device == "cuda" else _meta_checks
    g = torch.Generator().manual_seed(0)
    plain, picky = SamplingConfig(), SamplingConfig(top_k=7, top_p=0.9)
    a, b, c, d = (_req("a", 1, plain, 3), _req("b", 2, picky, 1), _req("c", 3, plain, 6),
                  _req("d", 4, plain, 8))
    c.is_chunked = 1  # its prefill goes on in the next batch
    schedule = [([a, b, c], True), ([c], True), ([a, b, c], False), ([d], True),
                ([b, c, d], False), ([b, c, d], False)]  # c's last chunk; d joins; a leaves
    rows = 0
    for t, (batch, extend) in enumerate(schedule):
        if t == 1:
            c.is_chunked = 0
        logits = torch.randn(len(batch), vocab, generator=g).to(device)
        h = torch.randn(len(batch), hidden, generator=g).to(device)
        with checks():
            tokens, info = runtime.sample(batch, logits, h, pool_rows=POOL_ROWS, extend=extend)
        if tuple(tokens.shape) != (len(batch),) or set(info) != {info_key(k) for k in INFO_KEYS}:
            raise AssertionError(f"batch {t}: tokens {tuple(tokens.shape)}, info {sorted(info)}")
        # what SGLang reads afterwards, when it processes the batch (allowed to wait)
        if len(info[info_key("soft")]) != len(batch):
            raise AssertionError(f"batch {t}: records of {len(info[info_key('soft')])} rows")
        toks = tokens.tolist() if device != "meta" else [0] * len(batch)
        for req, tok in zip(batch, toks):
            if not req.is_chunked:
                req.output_ids.append(tok)
        rows += len(batch)
    return rows
