"""Teacher-forced replay of soft inputs (docs/design.md §2.7, §5).

At update time the inputs a rollout fed back are rebuilt from its records. :func:`soft_inputs`
installs a forward hook on the model's input-embedding module that overwrites the rows at recorded
response positions with :func:`~soft_spatial.softthink.mixture.record_input_embeddings`, computed
from the module's own weight inside the hook, so gradients reach the embedding table and τ (and
through τ the controller). The hook is registered with ``prepend=True`` so that under FSDP2 it
runs while the weight is unsharded. Works for any output shape ``[..., D]`` whose leading shape
matches ``mask``: padded ``[B, L]`` or verl's packed ``[1, nnz]``.
"""
from __future__ import annotations

from contextlib import contextmanager
from collections.abc import Iterator

from torch import Tensor, nn

from soft_spatial.softthink.mixture import record_input_embeddings

__all__ = ["soft_inputs"]


@contextmanager
def soft_inputs(embedding: nn.Module, mask: Tensor, topk_ids: Tensor, scores: Tensor, tau: Tensor,
                soft_mask: Tensor) -> Iterator[None]:
    """Within the block, rows where ``mask`` is true take the recorded inputs.

    Args:
        embedding: the input-embedding module (``model.get_input_embeddings()``).
        mask: ``[...]`` bool, positions whose input comes from a record.
        topk_ids, scores: ``[..., K]``; tau, soft_mask: ``[...]`` (tau may require grad).
    """
    mask = mask.bool()

    def hook(module, args, output):
        if output.shape[:-1] != mask.shape:
            raise RuntimeError(f"soft_inputs: embedding output {tuple(output.shape)} does not "
                               f"match the record mask {tuple(mask.shape)}")
        new = record_input_embeddings(module.weight, topk_ids[mask], scores[mask], tau[mask],
                                      soft_mask[mask])
        out = output.clone()
        out[mask] = new.to(out.dtype)
        return out

    handle = embedding.register_forward_hook(hook, prepend=True)
    try:
        yield
    finally:
        handle.remove()
