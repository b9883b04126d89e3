"""The soft agent loop: verl's single-turn loop, plus the SoftTrace kept aligned with the
response (registered as ``soft_thinking_agent``)."""
from __future__ import annotations

from typing import Any

from verl.experimental.agent_loop.agent_loop import AgentLoopOutput, register
from verl.experimental.agent_loop.single_turn_agent_loop import SingleTurnAgentLoop

from .server import TRACE_FIELD

__all__ = ["SoftThinkingAgentLoop", "AGENT_NAME"]

AGENT_NAME = "soft_thinking_agent"


@register(AGENT_NAME)
class SoftThinkingAgentLoop(SingleTurnAgentLoop):
    """Single turn; the server's per-step records ride in ``extra_fields["soft_trace"]``, cut
    to the same length as ``response_ids`` (verl truncates responses to ``response_length``)."""

    async def run(self, sampling_params: dict[str, Any], **kwargs) -> AgentLoopOutput:
        out = await super().run(sampling_params, **kwargs)
        trace = out.extra_fields.get(TRACE_FIELD)
        if trace is None:
            raise RuntimeError(
                f"{AGENT_NAME}: the rollout server returned no '{TRACE_FIELD}'; soft thinking "
                f"needs rollout.name=local_soft (or sglang_soft)")
        n = len(out.response_ids)
        steps = len(trace["topk_ids"])
        if steps < n:
            raise RuntimeError(f"{AGENT_NAME}: {steps} records for {n} response tokens")
        if steps > n:
            trace = {k: v[:n] for k, v in trace.items()}
        out.extra_fields[TRACE_FIELD] = trace
        return out
