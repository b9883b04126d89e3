"""Where a micro-batch's rollout records go in the model's inputs and outputs (docs/design.md §3):
pure tensor code, no model and no verl. :func:`trace_layout` computes a micro-batch's
:class:`SoftBatch` once per forward; :class:`ReplayState` is what one forward of the soft engine
hands its hooks (the layout, the replay τ and, once the model ran, the likelihoods and hidden
states), from :meth:`~soft_spatial.actor.train_engine.SoftFSDPEngine.prepare_model_inputs` to the
controller's alignment step (:class:`~soft_spatial.actor.adaptsoft_trainer.AdaptSoftTrainer`)."""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from soft_spatial.softthink import StepLikelihood
from soft_spatial.softthink.trace import TRACE_KEYS, TRACE_PREFIX, RecordFields

__all__ = ["SoftBatch", "ReplayState", "trace_layout", "scatter_rows", "padded", "REPLAY_KEYS"]

#: the record fields the replay reads (every one but the entropy Ĥ, a diagnostic)
REPLAY_KEYS = tuple(k for k in TRACE_KEYS if k != "entropy")


def padded(t: Tensor) -> Tensor:
    """A dense tensor: a nested (jagged) one right-padded with zeros, any other as it is."""
    return torch.nested.to_padded_tensor(t, 0) if t.is_nested else t


def _lengths(micro_batch):
    """(prompt_lens, response_lens) per sequence, as verl's ``no_padding_2_padding`` computes them."""
    prompts, responses = micro_batch["prompts"], micro_batch["responses"]
    if prompts.is_nested:
        return prompts.offsets().diff(), responses.offsets().diff()
    mask = micro_batch["attention_mask"]
    p = prompts.shape[1]
    return mask[:, :p].sum(1), mask[:, p:].sum(1)


@dataclass
class SoftBatch:
    """Where a micro-batch's records go, computed once per forward (n = response steps in it).

    Record t of response i replaces the input embedding at the position of response token t;
    the model's output one position earlier scores step t.
    """

    seq: Tensor
    """``[n]`` long: the sequence (index into the micro-batch) of every response step."""
    embed_rows: Tensor
    """``[n]`` long: the row of the flattened embedding output (``embed_shape`` flattened) that
    record t replaces, i.e. the input position of response token t."""
    logit_rows: Tensor
    """``[n]`` long: the row of the flattened logits / hidden output that scores step t
    (``embed_rows - 1``, the position before)."""
    logprob_index: Tensor
    """``[n]`` long: the index of step t in verl's packed ``[nnz]`` log-prob layout."""
    topk_ids: Tensor
    """``[n, K]`` long: the recorded candidates; discrete steps ``[token, 0, …]``."""
    scores: Tensor
    """``[n, K]`` float: the recorded perturbed scores z; 0 at discrete steps."""
    tau: Tensor
    """``[n]`` float: the recorded τ; 0 at discrete steps."""
    u: Tensor
    """``[n]`` float: the controller's recorded uniform; 0 at discrete steps."""
    ctrl_x: Tensor
    """``[n, F]`` float: the controller's recorded input features; 0 at discrete steps."""
    soft_mask: Tensor
    """``[n]`` bool: True at soft steps (recorded as soft and inside the trace)."""
    embed_shape: tuple
    """The leading shape of the embedding output: ``(1, nnz + pad)`` on the remove-padding
    path, ``(B, S)`` on the padded path."""
    temperature: Tensor
    """``[n]`` float: the rollout temperature of every step."""
    num_sequences: int
    """B, the number of sequences in the micro-batch."""
    nnz: int
    """The number of real tokens in the micro-batch (verl's packed length without padding)."""


def trace_layout(micro_batch, *, remove_padding: bool, input_len: int,
                 temperature) -> SoftBatch:
    """Compute the :class:`SoftBatch` of a micro-batch (pure tensor code, no model).

    ``input_len``: the last dimension of the model's ``input_ids``: the packed length incl.
    static padding (remove-padding path) or the padded sequence length S (padded path).
    ``temperature``: a float or a per-sequence tensor ``[B]``.
    """
    input_ids = micro_batch["input_ids"]
    cu = input_ids.offsets()
    seq_lens = cu.diff()
    dev = cu.device
    b = seq_lens.numel()
    prompt_lens, resp_lens = (x.to(dev) for x in _lengths(micro_batch))
    if not torch.equal(prompt_lens + resp_lens, seq_lens):
        raise ValueError("soft replay: prompt + response lengths do not add up to the packed "
                         "sequence lengths")
    if (prompt_lens == 0).any():
        raise ValueError("soft replay: every sequence needs a non-empty prompt")
    rec = RecordFields(**{k: padded(micro_batch[TRACE_PREFIX + k]) if k in REPLAY_KEYS
                          else None for k in TRACE_KEYS})  # [B, R, ...]; the entropy unused
    tmask = padded(micro_batch[TRACE_PREFIX + "mask"]).bool()
    r = rec.topk_ids.shape[1]
    if int(resp_lens.max()) > r:
        raise ValueError(f"soft replay: responses of up to {int(resp_lens.max())} tokens but only "
                         f"{r} record slots")
    t = torch.arange(r, device=dev)
    in_resp = t[None, :] < resp_lens[:, None]  # [B, R]
    seq, step = in_resp.nonzero(as_tuple=True)
    pos = prompt_lens[seq] + step  # position of response token t inside its sequence
    packed = cu[:-1][seq] + pos  # position of response token t in the packed [nnz] layout
    if remove_padding:
        embed_rows = packed
        embed_shape = (1, input_len)
    else:
        embed_rows = seq * input_len + pos
        embed_shape = (b, input_len)
    tokens = input_ids.values()[packed]
    valid = tmask[seq, step]
    ids = rec.topk_ids[seq, step].long()
    if not torch.equal(ids[valid, 0], tokens[valid]):
        bad = int((ids[valid, 0] != tokens[valid]).sum())
        raise ValueError(f"soft replay: {bad} recorded spine ids differ from the response tokens; "
                         f"the trace is misaligned with the responses")
    disc_ids = torch.zeros_like(ids)
    disc_ids[:, 0] = tokens
    soft_mask = rec.soft[seq, step].bool() & valid
    ids = torch.where(soft_mask[:, None], ids, disc_ids)
    scores = torch.where(soft_mask[:, None], rec.scores[seq, step].float(), 0.0)
    zero = torch.zeros((), device=dev)
    tau = torch.where(soft_mask, rec.tau[seq, step].float(), zero)
    u = torch.where(soft_mask, rec.u[seq, step].float(), zero)
    ctrl_x = torch.where(soft_mask[:, None], rec.ctrl_x[seq, step].float(), 0.0)
    if isinstance(temperature, Tensor) and temperature.numel() > 1:
        temp = temperature.to(dev, torch.float32).reshape(-1)[seq]
    else:
        temp = torch.full((seq.numel(),), float(temperature), device=dev)
    return SoftBatch(seq=seq, embed_rows=embed_rows, logit_rows=embed_rows - 1,
                     logprob_index=packed - 1, topk_ids=ids, scores=scores, tau=tau, u=u,
                     ctrl_x=ctrl_x, soft_mask=soft_mask, embed_shape=embed_shape,
                     temperature=temp, num_sequences=b, nnz=int(cu[-1]))


def scatter_rows(shape, rows: Tensor, values: Tensor) -> Tensor:
    """A zero tensor of leading shape ``shape`` with ``values`` at flattened rows ``rows``
    (differentiable w.r.t. values)."""
    n = 1
    for c in shape:
        n *= c
    out = values.new_zeros((n,) + tuple(values.shape[1:]))
    return out.index_put((rows,), values).reshape(tuple(shape) + tuple(values.shape[1:]))


@dataclass
class ReplayState:
    """One forward's replay, filled in as it runs (every field but ``batch`` is optional)."""

    batch: SoftBatch
    """The micro-batch's layout."""
    tau_upd: Tensor | None = None
    """``[n]`` the controller's τ with the straight-through gradient (training the controller),
    else None (the recorded τ is replayed)."""
    tau_leaf: Tensor | None = None
    """The leaf ``tau_upd`` is computed from (its gradient is the controller's signal), or None."""
    hidden: Tensor | None = None
    """The output head's input (the final hidden states), captured by a forward pre-hook when the
    controller's alignment needs it."""
    likelihood: StepLikelihood | None = None
    """The per-step likelihoods (set by ``prepare_model_outputs``)."""
    hidden_steps: Tensor | None = None
    """``[n, D]`` the hidden states that scored each response step (from ``hidden``)."""
