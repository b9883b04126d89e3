"""What every rollout engine returns."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Union

from soft_spatial.softthink import SoftTrace

# A prompt is a chat (list of {"role", "content"} messages; content may hold {"type": "image",
# "image": PIL.Image | path} items), a list of token ids (text only), or
# {"prompt_ids": [...], "images": [...]} (ids rendered by a chat template with the image
# placeholders already expanded, as verl's agent loop sends them).
Prompt = Union[Sequence[Dict[str, Any]], Sequence[int], Dict[str, Any]]


class PromptTooLongError(ValueError):
    """Prompt ``index`` of a ``generate`` call has ``length`` tokens, more than ``limit``; callers
    that can drop a prompt (evaluation) catch it and retry without that prompt."""

    def __init__(self, index: int, length: int, limit: int, detail: str = ""):
        self.index, self.length, self.limit = index, length, limit
        super().__init__(f"prompt {index} is too long: {length} tokens > {limit} allowed{detail}")


FINISH_STOP = "stop"  # emitted an end-of-sequence token (included in token_ids)
FINISH_LENGTH = "length"  # reached max_new_tokens


@dataclass
class Completion:
    """One sampled response.

    ``token_ids`` are the emitted tokens (the spine during soft thinking), ``trace`` has one record
    per token. ``think_end`` is the index of the ``</think>`` token in ``token_ids`` (None if the
    spine never emitted it: then every step was soft). ``logprobs`` is each step's likelihood under
    the rollout policy: the Gumbel log-density of the recorded scores at soft steps (0 when the
    noise scale is 0), the token log-probability at T at discrete steps. ``debug`` holds optional per-step tensors
    (mixture weights, candidate log-probs) when the engine was asked for them.
    """

    prompt_index: int
    sample_index: int
    prompt_ids: List[int]
    token_ids: List[int]
    text: str
    trace: SoftTrace
    finish_reason: str
    think_end: Optional[int] = None
    logprobs: List[float] = field(default_factory=list)
    debug: Dict[str, Any] = field(default_factory=dict)

    @property
    def think_closed(self) -> bool:
        return self.think_end is not None
