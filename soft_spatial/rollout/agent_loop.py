"""The soft agent loop: verl's single-turn loop, plus the SoftTrace kept aligned with the
response and the rollout's noise key sent to the server (registered as ``soft_thinking_agent``)."""
from __future__ import annotations

from typing import Any

from verl.experimental.agent_loop.agent_loop import AgentLoopOutput
from verl.experimental.agent_loop.agent_loop import register as register_agent_loop
from verl.experimental.agent_loop.single_turn_agent_loop import SingleTurnAgentLoop

from soft_spatial.softthink.noise import NOISE_KEY, NOISE_ROWS, noise_param
from soft_spatial.softthink.trace import TRACE_FIELD

__all__ = ["SoftThinkingAgentLoop", "AGENT_NAME", "register", "with_noise_key"]

AGENT_NAME = "soft_thinking_agent"


def with_noise_key(sampling_params: dict[str, Any], row: dict[str, Any]) -> dict[str, Any]:
    """``sampling_params`` plus the noise entry (``softthink.noise.noise_param``) from the row's
    columns ``NOISE_KEY`` and ``NOISE_ROWS`` (filled by ``integration.ppo_trainer.tag_noise_keys``).

    verl gives every request a fresh random id; a seed derived from it made every run draw
    different noise. The key is a function of the training schedule, so the server seeds from
    it instead (docs/design.md §2.2). Rows without the column keep verl's parameters."""
    key = row.get(NOISE_KEY)
    if key is None:
        return sampling_params
    return dict(sampling_params, **noise_param(key, row.get(NOISE_ROWS, 0)))


class SoftThinkingAgentLoop(SingleTurnAgentLoop):
    """Single turn; the server's per-step records ride in ``extra_fields["soft_trace"]``, cut
    to the same length as ``response_ids`` (verl truncates responses to ``response_length``)."""

    async def run(self, sampling_params: dict[str, Any], **kwargs) -> AgentLoopOutput:
        out = await super().run(with_noise_key(sampling_params, kwargs), **kwargs)
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


def register() -> None:
    """Register :class:`SoftThinkingAgentLoop` as verl's agent loop ``soft_thinking_agent`` (idempotent)."""
    register_agent_loop(AGENT_NAME)(SoftThinkingAgentLoop)
