"""verl-server side of the SGLang soft backend (no sglang import).

* :func:`request_params` — what each request carries in ``sampling_params.custom_params``: its
  noise seed (``softthink.noise.request_row_seed(base, key)`` of its noise key, else of its
  request id: exactly the local_soft server's seed for that request) and the sampling settings
  of discrete steps;
* :class:`TraceAccumulator` — SGLang streams ``customized_info`` in slices (non-streaming requests
  are flushed every ``SGLANG_FORCE_STREAM_INTERVAL`` tokens and the tokenizer manager keeps only
  the last slice in ``meta_info``), so the server accumulates every slice per request id from the
  tokenizer manager's batch outputs and unpacks the request's records once it ends
  (:func:`split_records`; the packed rows: :mod:`.records`);
* the controller's wire format for the custom weight loader.
"""
from __future__ import annotations

import asyncio
import contextlib
import io
import threading
from typing import Any
from collections.abc import Awaitable, Callable, Hashable, Sequence

import torch

from soft_spatial.softthink import ControllerState, SamplingConfig

from soft_spatial.engines.sglang.records import RECORD_KEY, RecordsError, unpack

__all__ = ["PARAM_KEY", "collapse_image_pads", "PromptPrefill", "PREFILL_ONLY", "RECORD_KEY",
           "request_params", "TraceAccumulator", "split_records", "encode_controller",
           "decode_controller", "CONTROLLER_NAME"]

PARAM_KEY = "soft_spatial"  # custom_params[PARAM_KEY] = request_params(...)
CONTROLLER_NAME = "soft_spatial.controller"  # the one "weight" the controller travels as


def collapse_image_pads(ids: Sequence[int], image_token_id: int | None) -> list[int]:
    """Prompt ids with each run of image placeholders reduced to one placeholder.

    The local engine (and verl's agent loop) render prompts with the placeholders already
    expanded (one per merged patch). SGLang 0.5.12 with its tokenizer initialised decodes such
    ids to text and runs the model's HF processor on it again, which expands every placeholder
    once more (transformers 5.10: ``StopIteration`` in ``get_text_with_replacements``; verl's
    server is not affected: it runs SGLang with ``skip_tokenizer_init``, whose path collapses the
    runs itself). With one placeholder per image the processor's expansion reproduces the
    original ids (same processor, same images).
    """
    if image_token_id is None:
        return list(ids)
    out: list[int] = []
    for t in ids:
        if t == image_token_id and out and out[-1] == image_token_id:
            continue
        out.append(int(t))
    return out


PREFILL_ONLY = {"max_new_tokens": 0}  # sampling params of a request that only prefills its prompt


class PromptPrefill:
    """Prefill each distinct prompt once before its samples run (async, per event loop).

    The n samples of a prompt arrive together; SGLang prefills requests that are scheduled in the
    same batch each from scratch, and shares a prompt's KV through the radix cache only with
    requests scheduled after that prompt's prefill. So, like SGLang's own parallel sampling (a
    ``max_new_tokens=0`` request per prompt, then the n copies), the first sample of a prompt
    sends a prefill-only request and every sample waits for it; the entry is dropped when the
    prompt's last sample in flight is done (later requests match the radix cache anyway).
    """

    def __init__(self):
        self._entries: dict[Hashable, list] = {}

    @contextlib.asynccontextmanager
    async def prefilled(self, key: Hashable, prefill: Callable[[], Awaitable[Any]]):
        entry = self._entries.get(key)
        if entry is None:
            entry = self._entries[key] = [asyncio.ensure_future(prefill()), 0]
        entry[1] += 1
        try:
            await asyncio.shield(entry[0])
            yield
        finally:
            entry[1] -= 1
            if entry[1] == 0 and self._entries.get(key) is entry:
                del self._entries[key]

    def __len__(self) -> int:
        return len(self._entries)


def request_params(seed: int, sampling: SamplingConfig) -> dict[str, Any]:
    """The per-request soft parameters (JSON-able) the scheduler-side runtime reads."""
    return {"seed": int(seed), "temperature": sampling.temperature, "top_k": sampling.top_k,
            "top_p": sampling.top_p, "greedy": sampling.greedy}


class TraceAccumulator:
    """Per-request concatenation of the streamed record slices (thread-safe): each request's
    packed rows (:mod:`.records`), in step order."""

    def __init__(self):
        self._acc: dict[str, list[bytes]] = {}
        self._lock = threading.Lock()

    def feed(self, rids: Sequence[str], customized_info: dict[str, list[Any]] | None) -> None:
        """One batch output: ``customized_info[RECORD_KEY][i]`` is the list of new packed rows of
        request ``rids[i]`` (SGLang's ``BatchTokenIDOutput``/``BatchStrOutput`` layout)."""
        rows = (customized_info or {}).get(RECORD_KEY)
        if not rows:
            return
        with self._lock:
            for rid, new in zip(rids, rows):
                self._acc.setdefault(rid, []).extend(new)

    def received(self, rid: str) -> int:
        """Records received so far for request ``rid``."""
        with self._lock:
            return len(self._acc.get(rid, ()))

    def pop(self, rid: str) -> list[bytes] | None:
        with self._lock:
            return self._acc.pop(rid, None)

    def __len__(self) -> int:
        return len(self._acc)


def split_records(rows: list[bytes] | None, n_tokens: int, rid: str = "a request"
                  ) -> tuple[dict[str, list], list[float]]:
    """A request's accumulated rows → (``SoftTrace.to_lists()``-format dict, per-step
    log-likelihoods). There must be one record per emitted token, sampled at noise steps 0, 1,
    2, ... (:func:`~.records.unpack`, which names ``rid`` when they are not)."""
    if rows is None:
        raise RuntimeError("sglang_soft: SGLang returned no soft records for a request; is the "
                           "server running with the soft_spatial plugin (sampling_backend="
                           "soft_gumbel)?")
    if len(rows) != n_tokens:
        raise RecordsError(f"sglang_soft: {len(rows)} records for {n_tokens} tokens "
                           f"(request {rid})")
    return unpack(rows, f"request {rid}")


def encode_controller(state: ControllerState) -> torch.Tensor:
    """AdaptSoft's state → one uint8 tensor (its blob, ``torch.save``d: travels like a weight)."""
    buf = io.BytesIO()
    torch.save(state.to_blob(), buf)
    return torch.frombuffer(bytearray(buf.getvalue()), dtype=torch.uint8)


def decode_controller(blob: torch.Tensor) -> ControllerState:
    """The state :func:`encode_controller` sent (read weights-only: a tensor from elsewhere
    runs no code)."""
    data = bytes(blob.detach().to("cpu", torch.uint8).numpy().tobytes())
    return ControllerState.from_blob(torch.load(io.BytesIO(data), map_location="cpu",
                                                weights_only=True), source="the controller update")
