"""The output head's logits in the precision the run's likelihoods use (docs/sglang.md, "bf16 and
the replay check").

A bf16 model's head returns bf16 logits: each is rounded to 8 significant bits, an error of up to
half a bf16 ulp, 2^(⌊log₂|ℓ|⌋ − 8), i.e. up to 0.25 at |ℓ| = 100 (0.125 at 32). The rollout
and the trainer round independently, and a soft step's Gumbel log-density amplifies the
per-candidate difference (:func:`~soft_spatial.softthink.density.log_density_gap`). With
``DensityConfig.fp32_logits`` both sides compute the head's product in fp32 from the same bf16
hidden state and weights (SGLang: ``enable_fp32_lm_head``; the embedded engine and the actor:
:func:`head_logits` / :func:`fp32_head`), so only the hidden states' own differences remain.

* :func:`head_logits` — ``head(hidden)``, or the same product in fp32;
* :func:`fp32_head` — within the block, every call of ``head`` computes in fp32 (the actor,
  whose model calls its head itself), under autocast too;
* :func:`ulp`, :func:`rounding_delta_var` — the spacing of a dtype at a logit, and the variance
  of the candidate log-prob change Δ_k that rounding each logit to it causes.
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["head_logits", "fp32_head", "fp32_linear", "ulp", "rounding_delta_var"]


def fp32_linear(head: nn.Module, hidden: Tensor) -> Tensor:
    """``hidden @ head.weight.T (+ bias)`` in fp32: inputs and weights upcast (exactly), autocast
    off, the output fp32 ``[..., V]``; gradients reach ``hidden`` and the weights in their own
    dtypes."""
    bias = getattr(head, "bias", None)
    with torch.autocast(hidden.device.type, enabled=False):
        return F.linear(hidden.float(), head.weight.float(), None if bias is None else bias.float())


def head_logits(head: nn.Module, hidden: Tensor, fp32: bool = False) -> Tensor:
    """The logits of ``hidden`` ``[..., D]``: ``head(hidden)`` (in the head's dtype), or with
    ``fp32`` :func:`fp32_linear`."""
    return fp32_linear(head, hidden) if fp32 else head(hidden)


@contextmanager
def fp32_head(head: nn.Module) -> Iterator[None]:
    """Within the block, ``head(x)`` returns :func:`fp32_linear` (hooks and FSDP's unsharding
    still run: only the module's ``forward`` is replaced, on this instance)."""
    if not isinstance(getattr(head, "weight", None), Tensor) or head.weight.dim() != 2:
        raise TypeError(f"fp32_head needs a linear output head with a [V, D] weight, got "
                        f"{type(head).__name__}")
    if "forward" in head.__dict__:
        raise RuntimeError(f"{type(head).__name__}.forward is already replaced on this instance")
    head.forward = lambda hidden: fp32_linear(head, hidden)
    try:
        yield
    finally:
        del head.forward


def ulp(x: Tensor, dtype: torch.dtype = torch.bfloat16) -> Tensor:
    """The spacing of ``dtype``'s numbers at |x| (fp32 tensor): 2^⌊log₂|x|⌋ · eps, eps = 2⁻⁷
    for bf16 (0.5 at |x| = 100, 0.125 at 16); the smallest normal's at 0."""
    info = torch.finfo(dtype)
    return torch.exp2(torch.floor(torch.log2(x.float().abs().clamp(min=info.tiny)))) * info.eps


def rounding_delta_var(cand_logits: Tensor, temperature: float = 1.0,
                       dtype: torch.dtype = torch.bfloat16) -> Tensor:
    """Variance of Δ_k, the change of the candidate log-probs log p̃_k = log softmax_C(ℓ/T)_k,
    when every candidate logit ℓ_j ``[..., K]`` is rounded to ``dtype`` once (round to nearest:
    an error uniform in ±ulp_j/2, variance v_j = ulp_j²/12, independent across j). To first
    order Δ_k = (r_k − Σ_j p̃_j r_j)/T, so

        Var Δ_k = [v_k (1 − 2 p̃_k) + Σ_j p̃_j² v_j] / T².

    Two sides that round independently (rollout and trainer) give twice this for their
    difference. Returns ``[..., K]`` fp32."""
    ell = cand_logits.float()
    v = ulp(ell, dtype) ** 2 / 12.0
    p = torch.softmax(ell / temperature, -1)
    return (v * (1 - 2 * p) + (p * p * v).sum(-1, keepdim=True)) / temperature ** 2
