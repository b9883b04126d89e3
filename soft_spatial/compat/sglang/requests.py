"""The scheduler's requests and their pool as the plugin reads them (sglang 0.5.12,
``managers/schedule_batch.py``, ``mem_cache/memory_pool.py``, ``mem_cache/common.py``): the radix
cache's insertion flag, the request pool's rows, where a request gives its slot back. Imports
sglang only inside functions."""
from __future__ import annotations

import inspect
from collections.abc import Callable

from soft_spatial.compat.sglang.checks import missing

__all__ = ["protect_soft_kv", "request_pool_rows", "worker_request_pool",
           "forward_batch_request_pool", "POOL_FREE_TARGET", "problems"]


class _SkipInsert:
    """The value of ``Req.skip_radix_cache_insert`` that SGLang reads as a bool when it inserts
    the request into the radix tree: true while the original flag or ``soft_kv()`` is."""

    __slots__ = ("original", "soft_kv")

    def __init__(self, original, soft_kv: Callable[[], bool]):
        self.original, self.soft_kv = original, soft_kv

    def __bool__(self) -> bool:
        return bool(self.original) or bool(self.soft_kv())


def protect_soft_kv(req, soft_kv: Callable[[], bool]) -> None:
    """Keep ``req``'s KV out of the radix cache whenever ``soft_kv()`` says the KV to insert holds
    a position computed from a soft input (sglang 0.5.12: ``Req.skip_radix_cache_insert``,
    ``managers/schedule_batch.py`` L887, read as a bool by ``mem_cache/common.py`` L47
    ``maybe_cache_unfinished_req`` and L582 ``release_kv_cache``, the two paths that insert a
    request into the tree). Idempotent.

    ``soft_kv`` is asked at the moment SGLang inserts, not when this is called: the prompt's KV
    (inserted after the prefill; a function of the prompt's tokens and images) is shared by the G
    samples of a prompt and by later requests, while KV computed from mixture inputs, which the
    tree's token keys do not describe, is freed instead of inserted and never matched. Under
    overlap scheduling the prefill's result is processed after the request's first decode batch
    is launched, so a flag set before that decode would also drop the prompt.
    """
    original = getattr(req, "skip_radix_cache_insert", False)
    if not isinstance(original, _SkipInsert):
        req.skip_radix_cache_insert = _SkipInsert(original, soft_kv)


def request_pool_rows(pool) -> int | None:
    """Rows of SGLang's request-to-token pool, i.e. one more than the largest request-pool slot
    (sglang 0.5.12: ``ReqToTokenPool.req_to_token`` has ``size + 1`` rows, ``mem_cache/
    memory_pool.py`` L142-L152: slots ``1..size`` go to requests, row 0 is the padding row that
    CUDA-graph padded batches index). The size of the static decode-input buffers, so every
    ``Req.req_pool_idx`` and every padded graph row indexes them in range. None for stand-ins."""
    table = getattr(pool, "req_to_token", None)
    return int(table.shape[0]) if table is not None else None


def worker_request_pool(worker):
    """The request pool of a ``TpModelWorker`` (sglang 0.5.12: ``worker.model_runner.
    req_to_token_pool``); None for stand-ins without a model runner."""
    return getattr(getattr(worker, "model_runner", None), "req_to_token_pool", None)


def forward_batch_request_pool(forward_batch):
    """The request pool a ``ForwardBatch`` indexes (sglang 0.5.12: the field
    ``ForwardBatch.req_to_token_pool``, set also on the batches ``CudaGraphRunner.
    capture_one_batch_size`` builds at start-up, where no scheduler batch exists)."""
    return getattr(forward_batch, "req_to_token_pool", None)


#: where a request gives its request-pool slot back (sglang 0.5.12 ``ReqToTokenPool.free(self,
#: req)``, L179: every path that ends a request's life in the pool — finish, abort, retraction —
#: calls it with the Req while ``req.req_pool_idx`` still names the slot); the plugin hooks it
#: (``HookRegistry``, BEFORE) to learn which requests left without a per-step pass over the rows
POOL_FREE_TARGET = "sglang.srt.mem_cache.memory_pool.ReqToTokenPool.free"


def problems() -> list:
    """What :func:`protect_soft_kv` and the slot bookkeeping rely on: SGLang's two insertion
    paths read ``Req.skip_radix_cache_insert`` as a bool; ``ReqToTokenPool.free(self, req)`` frees
    ``req.req_pool_idx``, and finishing a request frees it there (:data:`POOL_FREE_TARGET`)."""
    import pkgutil

    from sglang.srt.mem_cache import common
    out = []
    src = inspect.getsource(common)
    for needle in ('if getattr(req, "skip_radix_cache_insert", False):',
                   'not getattr(req, "skip_radix_cache_insert", False)'):
        if needle not in src:
            out.append(f"mem_cache.common no longer reads Req.skip_radix_cache_insert as a "
                       f"bool: {needle!r} (protect_soft_kv)")
    cls_path, method = POOL_FREE_TARGET.rsplit(".", 1)
    fn = getattr(pkgutil.resolve_name(cls_path), method, None)
    if fn is None or list(inspect.signature(fn).parameters) != ["self", "req"]:
        return out + [f"sglang {POOL_FREE_TARGET} is gone or changed (the plugin's slot "
                      f"bookkeeping)"]
    return out + missing([(fn, ("self.free_slots.append(req.req_pool_idx)",)),
                          (common.release_kv_cache, ("req_to_token_pool.free(req)",))],
                         "the plugin's slot bookkeeping")
