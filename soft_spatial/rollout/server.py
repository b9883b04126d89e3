"""The embedded engine as a verl rollout server (token in, token + SoftTrace out).

verl's agent loops call ``server.generate.remote(request_id=..., prompt_ids=..., sampling_params=...,
image_data=...)`` once per sample, concurrently. :class:`LocalSoftServer` gathers requests into
batches for :class:`~soft_spatial.engines.local.LocalEngine` and answers each with a verl
``TokenOutput`` whose ``extra_fields["soft_trace"]`` holds the response's records (each step sent
once). Weights and the AdaptSoft controller arrive through :meth:`update_weights` /
:meth:`set_controller` from the colocated training workers.

Reproducibility (docs/design.md §2.2): a request's noise seed derives from its noise key (the
noise entry the soft agent loop adds to the sampling params, :mod:`soft_spatial.softthink.noise`),
not from verl's random request id. Which rows share a batch changes the floating-point rounding
of every row (a CPU matmul's result for one row depends on the batch's size and the row's place
in it), and soft decoding amplifies rounding; so when the key says how many rows its generation
batch has, the server waits for all of them and decodes them in key order, in chunks of
``max_batch_rows``: the batches, hence the numbers, no longer depend on when requests arrive.
Requests without a key are batched as they arrive within ``batch_window_s``.
"""
from __future__ import annotations

import asyncio
from typing import Any, NamedTuple

import torch

from soft_spatial.engines.local import LocalEngine
from soft_spatial.softthink import AdaptSoft, ControllerState, SamplingConfig
from soft_spatial.softthink.noise import NoiseKey, pop_noise_param, request_seed
from soft_spatial.softthink.settings import SoftSettings, sampling_config
from soft_spatial.softthink.trace import TRACE_FIELD

__all__ = ["LocalSoftServer"]


class PendingRequest(NamedTuple):
    """One ``generate`` call waiting for its batch."""

    request_id: str
    prompt_ids: list[int]
    sampling_params: dict[str, Any]
    images: list[Any]
    result: asyncio.Future  # resolved with the request's TokenOutput (or its batch's exception)
    noise_key: NoiseKey | None = None  # seeds the noise (else the request id)

    @property
    def seed_key(self) -> NoiseKey | str:
        return self.noise_key if self.noise_key is not None else self.request_id

    @property
    def position(self) -> int:
        """The row's place in its generation batch (from the noise key)."""
        return self.noise_key.position if self.noise_key is not None else 0


class _Stream:
    """The rows of one generation batch that have arrived, and when all of them are in."""

    def __init__(self, rows: int):
        self.rows, self.reqs, self.complete = rows, [], asyncio.Event()
        self.task: asyncio.Task | None = None  # _flush_stream (kept referenced)


class LocalSoftServer:
    """Ray actor body (wrap with ``ray.remote``) hosting one LocalEngine."""

    def __init__(self, model_path: str, response_length: int, prompt_length: int,
                 settings: SoftSettings | None = None, dtype: str = "float32",
                 device: str = "cpu"):
        # verl's reply type, imported while the actor starts (beside the other actors): its import
        # is verl's (5-7 s of CPU), which in the first batch every agent loop of step 1 waited for
        from verl.workers.rollout.replica import TokenOutput

        self._token_output = TokenOutput
        self.settings = settings if settings is not None else SoftSettings()  # parsed by the driver
        self.response_length, self.prompt_length = response_length, prompt_length
        self.engine = LocalEngine.from_pretrained(
            model_path, device=device, dtype=getattr(torch, dtype),
            max_batch_rows=self.settings.max_batch_rows,
            max_prompt_length=prompt_length)
        if self.settings.soft_thinking.mode == "adaptsoft":
            self.engine.set_controller(AdaptSoft.from_config(
                self.settings.adaptsoft, self.engine.hidden_size).to_state())
        self._pending: list[PendingRequest] = []
        self._streams: dict[str, _Stream] = {}
        self._flush_task: asyncio.Task | None = None
        self._lock = asyncio.Lock()
        self.weight_version = 0

    # -- generation -------------------------------------------------------------------------
    async def generate(self, request_id, prompt_ids, sampling_params, image_data=None,
                       video_data=None, **kwargs):
        if video_data:
            raise ValueError("the local soft rollout server does not support video inputs")
        params = dict(sampling_params)
        key, rows = pop_noise_param(params)
        fut = asyncio.get_running_loop().create_future()
        req = PendingRequest(request_id, list(prompt_ids), params, list(image_data or []), fut,
                             key)
        if key is not None and rows > 0:
            self._add_to_stream(key.batch, rows, req)
        else:
            self._pending.append(req)
            if self._flush_task is None or self._flush_task.done():
                self._flush_task = asyncio.create_task(self._flush_soon())
        return await fut

    def _add_to_stream(self, name: str, rows: int, req: PendingRequest) -> None:
        st = self._streams.get(name)
        if st is None:
            st = self._streams[name] = _Stream(rows)
            st.task = asyncio.create_task(self._flush_stream(name, st))
        st.reqs.append(req)
        if len(st.reqs) >= st.rows:
            st.complete.set()

    async def _flush_stream(self, name: str, st: _Stream):
        """Decode a generation batch once all its rows are in (or after ``stream_wait_s``, when
        some never come: then the batches depend on arrival again), in key order."""
        try:
            await asyncio.wait_for(st.complete.wait(), self.settings.stream_wait_s)
        except asyncio.TimeoutError:
            pass
        if self._streams.get(name) is st:
            del self._streams[name]
        async with self._lock:
            await self._decode(sorted(st.reqs, key=lambda r: r.position))

    async def _flush_soon(self):
        await asyncio.sleep(self.settings.batch_window_s)
        async with self._lock:
            while self._pending:
                batch, self._pending = self._pending, []
                await self._decode(batch)

    async def _decode(self, batch: list[PendingRequest]):
        groups: dict[tuple, list[PendingRequest]] = {}
        for req in batch:  # requests decode together when their sampling params match
            key = tuple(sorted((k, str(v)) for k, v in req.sampling_params.items()))
            groups.setdefault(key, []).append(req)
        for reqs in groups.values():
            try:
                outs = await asyncio.to_thread(self._run, reqs)
                for req, out in zip(reqs, outs):
                    req.result.set_result(out)
            except Exception as exc:  # every waiting request learns about the failure
                for req in reqs:
                    if not req.result.done():
                        req.result.set_exception(exc)

    def _sampling(self, params: dict[str, Any]) -> SamplingConfig:
        return sampling_config(params, self.response_length)

    def _run(self, reqs: list[PendingRequest]):
        sampling = self._sampling(reqs[0].sampling_params)  # the same for every request here
        prompts = [{"prompt_ids": r.prompt_ids, "images": r.images} for r in reqs]
        seeds = [request_seed(self.settings.seed, r.seed_key) for r in reqs]
        outs = self.engine.generate(prompts, soft_thinking=self.settings.soft_thinking,
                                    sampling=sampling, n=1, seeds=seeds,
                                    density=self.settings.density)
        results = []
        for o in outs:
            stop = "completed" if o.finish_reason == "stop" else "length"
            results.append(self._token_output(
                token_ids=o.token_ids, log_probs=o.logprobs, stop_reason=stop,
                extra_fields={TRACE_FIELD: o.trace.to_lists(),
                              "soft_think_closed": o.think_closed,
                              "soft_weight_version": self.weight_version}))
        return results

    # -- weights ------------------------------------------------------------------------------
    def update_weights(self, state_dict: dict[str, torch.Tensor]) -> int:
        self.engine.update_weights(state_dict)
        self.weight_version += 1
        return self.weight_version

    def set_controller(self, state: ControllerState) -> None:
        """AdaptSoft's state from the trainer."""
        self.engine.set_controller(state)

    # -- lifecycle hooks verl calls on every server (nothing to free on the CPU) -------------
    async def wake_up(self):
        return None

    async def sleep(self):
        return None

    async def clear_kv_cache(self):
        return None

    async def release_kv_cache(self):
        return None

    async def resume_kv_cache(self):
        return None

    async def abort_all_requests(self, reject_request: bool = False):
        return None

    async def resume_generation(self):
        return None

    async def start_profile(self, **kwargs):
        return None

    async def stop_profile(self):
        return None
