"""SGLang's sampler internals the plugin's ``Sampler`` subclass calls (sglang 0.5.12,
``sglang/srt/layers/sampler.py``, class ``Sampler``): its logit processors, its log-prob output and
its tensor-parallel token sync, as its own ``forward`` does. Imports sglang only inside functions."""
from __future__ import annotations

import inspect

__all__ = ["preprocess_logits", "attach_logprobs", "sync_token_ids_across_tp", "problems"]


def preprocess_logits(sampler, logits, sampling_info):
    """``Sampler._preprocess_logits`` (0.5.12 L74): SGLang's custom logit processors and NaN
    check, as its own ``forward`` applies them before sampling."""
    return sampler._preprocess_logits(logits, sampling_info)


def attach_logprobs(sampler, logits_output, logprobs, top_logprobs_nums, token_ids_logprobs,
                    sampling_info, tokens) -> None:
    """``Sampler._attach_logprobs_to_output`` (0.5.12 L329): fills the output's log-prob
    fields for the chosen ``tokens`` when the request asked for log-probs."""
    sampler._attach_logprobs_to_output(logits_output, logprobs, top_logprobs_nums,
                                       token_ids_logprobs, sampling_info, tokens)


def sync_token_ids_across_tp(sampler, tokens, sampling_info) -> None:
    """``Sampler._sync_token_ids_across_tp`` (0.5.12 L361): with ``SYNC_TOKEN_IDS_ACROSS_TP=1``
    the ranks' sampled token ids are made equal (the spine only, not the records)."""
    sampler._sync_token_ids_across_tp(tokens, sampling_info)


def problems() -> list:
    """The ``Sampler`` methods above, with the parameters they are called with."""
    from sglang.srt.layers.sampler import Sampler
    out = []
    for name, params in (("_preprocess_logits", ["self", "logits", "sampling_info"]),
                         ("_attach_logprobs_to_output",
                          ["self", "logits_output", "logprobs", "top_logprobs_nums",
                           "token_ids_logprobs", "sampling_info", "batch_next_token_ids"]),
                         ("_sync_token_ids_across_tp",
                          ["self", "batch_next_token_ids", "sampling_info"])):
        fn = getattr(Sampler, name, None)
        got = None if fn is None else list(inspect.signature(fn).parameters)
        if got != params:
            out.append(f"sglang Sampler.{name} is gone or changed: {got} != {params}")
    return out
