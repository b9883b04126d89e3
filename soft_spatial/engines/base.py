"""What every rollout engine is (:class:`Engine`), takes and returns, and the checks both engines
share (prompt length limit, per-prompt seeds, progress)."""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable
from collections.abc import Callable, Iterator, Sequence

from soft_spatial.models.tokens import single_token_id
from soft_spatial.softthink import ControllerState, SamplingConfig, SoftThinkingConfig, SoftTrace

# A prompt is a chat (list of {"role", "content"} messages; content may hold {"type": "image",
# "image": PIL.Image | path} items), a list of token ids (text only), or
# {"prompt_ids": [...], "images": [...]} (ids rendered by a chat template with the image
# placeholders already expanded, as verl's agent loop sends them).
Prompt = Sequence[dict[str, Any]] | Sequence[int] | dict[str, Any]


class PromptTooLongError(ValueError):
    """Prompt ``index`` of a ``generate`` call has ``length`` tokens, more than ``limit``; callers
    that can drop a prompt (evaluation) catch it and retry without that prompt."""

    def __init__(self, index: int, length: int, limit: int, detail: str = ""):
        self.index, self.length, self.limit = index, length, limit
        super().__init__(f"prompt {index} is too long: {length} tokens > {limit} allowed{detail}")


def prompt_limit(max_prompt_length: int | None, context_length: int | None,
                 sampling: SamplingConfig) -> int:
    """Longest prompt (tokens) a request with ``sampling`` may have: ``max_prompt_length``, else
    the context length less ``max_new_tokens`` (no limit without either)."""
    if max_prompt_length:
        return max_prompt_length
    return context_length - sampling.max_new_tokens if context_length else 10 ** 9


def check_prompt_ids(i: int, ids: Sequence[int], limit: int | None,
                     context_length: int | None, max_prompt_length: int | None) -> None:
    """Prompt ``i`` is not empty and has at most ``limit`` ids (PromptTooLongError)."""
    if not ids:
        raise ValueError(f"prompt {i} is empty")
    if limit is not None and len(ids) > limit:
        raise PromptTooLongError(i, len(ids), limit, f" (context {context_length}, "
                                 f"max_prompt_length {max_prompt_length})")


def prompt_seeds(n_prompts: int, seed: int, seeds: Sequence[int] | None) -> list[int]:
    """Each prompt's seed: ``seeds``, else ``seed + i`` (row (i, j) then uses
    ``noise.row_seed(seeds[i], j)``)."""
    seeds = list(seeds) if seeds is not None else [seed + i for i in range(n_prompts)]
    if len(seeds) != n_prompts:
        raise ValueError(f"got {len(seeds)} seeds for {n_prompts} prompts")
    return seeds


@contextlib.contextmanager
def progress_bar(enabled: bool, total: int, desc: str) -> Iterator[Callable[[int], Any]]:
    """A tqdm bar over ``total`` samples when ``enabled``; yields its ``update`` (a no-op
    otherwise)."""
    if not enabled:
        yield lambda k: None
        return
    from tqdm.auto import tqdm
    bar = tqdm(total=total, desc=desc, unit="sample")
    try:
        yield bar.update
    finally:
        bar.close()


FINISH_STOP = "stop"  # emitted an end-of-sequence token (included in token_ids)
FINISH_LENGTH = "length"  # reached max_new_tokens


@dataclass
class Completion:
    """One sampled response.

    ``token_ids`` are the emitted tokens (the spine during soft thinking), ``trace`` has one record
    per token. ``think_end`` is where the think block closed, in every mode: the index of the first
    ``</think>`` in ``token_ids`` (:func:`think_end_index`; in soft modes the last soft step), None
    if the spine never emitted it (in soft modes every step was then soft). ``logprobs`` is each step's likelihood under
    the rollout policy: the Gumbel log-density of the recorded scores at soft steps (0 when the
    noise scale is 0), the token log-probability at T at discrete steps. ``debug`` holds optional per-step tensors
    (mixture weights, candidate log-probs) when the engine was asked for them.
    """

    prompt_index: int
    sample_index: int
    prompt_ids: list[int]
    token_ids: list[int]
    text: str
    trace: SoftTrace
    finish_reason: str
    think_end: int | None = None
    logprobs: list[float] = field(default_factory=list)
    debug: dict[str, Any] = field(default_factory=dict)

    @property
    def think_closed(self) -> bool:
        return self.think_end is not None


def think_end_token(tokenizer, soft_thinking: SoftThinkingConfig) -> int | None:
    """Id of ``soft_thinking.think_end`` (``</think>``), the token whose first emission closes the
    think block in every mode. Soft modes switch to discrete decoding on it and need it as one
    token (ValueError naming the tokenizer); in hard mode a tokenizer without such a token has no
    think block to close (None)."""
    try:
        return single_token_id(tokenizer, soft_thinking.think_end)
    except ValueError:
        if soft_thinking.is_soft:
            raise
        return None


def think_end_index(token_ids: Sequence[int], think_end_id: int | None) -> int | None:
    """Where the think block closed: the index of the first ``think_end_id`` in ``token_ids``, None
    if it never appears (or there is no such token). One reading for every mode and engine
    (:attr:`Completion.think_end`, the rollout servers' ``soft_think_closed``)."""
    if think_end_id is None:
        return None
    for i, token in enumerate(token_ids):
        if token == think_end_id:
            return i
    return None


@runtime_checkable
class Engine(Protocol):
    """The contract every rollout engine keeps (:class:`~soft_spatial.engines.local.LocalEngine`,
    :class:`~soft_spatial.engines.sglang.engine.SGLangEngine`); evaluation and the rollout server
    use nothing else. An engine may add keyword parameters with defaults (tests/engines/test_base.py
    checks the signatures)."""

    def generate(self, prompts: Sequence[Prompt], soft_thinking: SoftThinkingConfig | None = None,
                 sampling: SamplingConfig | None = None, n: int = 1, seed: int = 0,
                 seeds: Sequence[int] | None = None, progress: bool = False) -> list[Completion]:
        """``n`` completions per prompt, prompt-major (prompt i's samples at ``i*n .. i*n+n-1``);
        row (i, j) draws its noise from ``row_seed(seeds[i], j)`` (``seeds`` default ``seed + i``).
        A prompt longer than the engine's limit raises :class:`PromptTooLongError`."""
        ...

    def update_weights(self, state_dict: dict[str, Any]) -> None:
        """Copy (a subset of) policy weights in, by their Hugging Face names."""
        ...

    def set_controller(self, controller: ControllerState | None) -> None:
        """Install AdaptSoft's state (None: no controller)."""
        ...

    def close(self) -> None:
        """Release what the engine holds (processes, GPU memory); idempotent."""
        ...
