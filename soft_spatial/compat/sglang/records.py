"""The records and weights on the server's side of SGLang (sglang 0.5.12,
``managers/tokenizer_manager.py``, ``managers/io_struct.py``): every batch output's records
collected before SGLang keeps only the newest slice, and the weight-update request verl's adapter
builds. Imports sglang only inside functions."""
from __future__ import annotations

import inspect

__all__ = ["collect_records", "tensor_update_request", "problems"]


def collect_records(tokenizer_manager, accumulator) -> None:
    """Feed each batch output's ``customized_info`` to ``accumulator`` (a
    :class:`~soft_spatial.engines.sglang.client.TraceAccumulator`) before SGLang handles it.
    Idempotent.

    sglang 0.5.12: ``TokenizerManager.handle_loop`` passes every ``BatchStrOutput`` /
    ``BatchTokenIDOutput`` to ``self._handle_batch_output`` (``managers/tokenizer_manager.py``
    L1654/L1660), which keeps only the newest ``customized_info`` slice in ``meta_info``; this
    wraps that method on the instance.
    """
    handle = tokenizer_manager._handle_batch_output
    if getattr(handle, "soft_spatial_accumulator", None) is accumulator:
        return

    async def _handle_batch_output(recv_obj):
        accumulator.feed(recv_obj.rids, getattr(recv_obj, "customized_info", None))
        return await handle(recv_obj)

    _handle_batch_output.soft_spatial_accumulator = accumulator
    tokenizer_manager._handle_batch_output = _handle_batch_output


def tensor_update_request(named_tensors, copies: int, load_format: str | None,
                          flush_cache: bool):
    """An ``UpdateWeightsFromTensorReqInput`` carrying ``named_tensors`` serialized once per TP
    worker (``copies``), as verl's SGLang ``ServerAdapter.update_weights`` builds it (sglang
    0.5.12: ``managers/io_struct.py`` L1466, ``utils/common.py`` L2234
    ``MultiprocessingSerializer``, and ``utils/patch_torch.py`` L41
    ``monkey_patch_torch_reductions``, which makes device tensors pickle as IPC handles)."""
    from sglang.srt.managers.io_struct import UpdateWeightsFromTensorReqInput
    from sglang.srt.utils import MultiprocessingSerializer
    from sglang.srt.utils.patch_torch import monkey_patch_torch_reductions

    monkey_patch_torch_reductions()
    named = list(named_tensors)
    return UpdateWeightsFromTensorReqInput(
        serialized_named_tensors=[MultiprocessingSerializer.serialize(named)
                                  for _ in range(copies)],
        load_format=load_format, flush_cache=flush_cache)


def problems() -> list:
    from sglang.srt.managers.io_struct import UpdateWeightsFromTensorReqInput
    from sglang.srt.managers.tokenizer_manager import TokenizerManager
    out = []
    if not callable(getattr(TokenizerManager, "_handle_batch_output", None)) or (
            "self._handle_batch_output(recv_obj)"
            not in inspect.getsource(TokenizerManager.handle_loop)):
        out.append("TokenizerManager.handle_loop no longer calls "
                   "self._handle_batch_output(recv_obj) (collect_records)")
    fields = set(getattr(UpdateWeightsFromTensorReqInput, "__dataclass_fields__", {}))
    lost = {"serialized_named_tensors", "load_format", "flush_cache"} - fields
    if lost:
        out.append(f"UpdateWeightsFromTensorReqInput lost {sorted(lost)} "
                   f"(tensor_update_request)")
    return out
