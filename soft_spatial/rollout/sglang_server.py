"""SGLang as a verl rollout backend with soft thinking: ``rollout.name=sglang_soft``.

* :class:`SGLangSoftHttpServer` (a verl ``SGLangHttpServer``): before SGLang starts, exports the
  run's settings (``rollout.custom``, as for local_soft) with what they need of the model
  (:func:`scheduler_setup`) for the scheduler processes, sets the
  server arguments soft decoding needs (:func:`~soft_spatial.engines.sglang.required_server_args`)
  and launches the schedulers through :func:`soft_spatial.engines.sglang.hooks.
  run_scheduler_process` (which installs the plugin in each spawned process, then runs SGLang's).
  Each request carries its noise seed (from its noise key, else its request id) and sampling
  settings in ``custom_params``; the records
  streamed back through ``customized_info`` are accumulated per request id on this side and
  returned once as ``TokenOutput.extra_fields["soft_trace"]`` (``SoftTrace.to_lists()`` format),
  with ``log_probs`` = each step's rollout likelihood, like the local_soft server. With the
  radix cache on (the default), the first sample of a prompt in flight first prefills the prompt
  alone (:class:`~soft_spatial.engines.sglang.client.PromptPrefill`), so the n samples share it.
* :class:`SGLangSoftReplica`: verl's SGLangReplica with the server class above.
* :class:`SGLangSoftServerAdapter`: verl's SGLang ServerAdapter plus ``update_controller``,
  which sends AdaptSoft's weights to every TP worker through the custom weight loader.

Imports verl's SGLang modules (hence sglang): load it through the lazy registration in
:mod:`soft_spatial.plugin` only.
"""
from __future__ import annotations

import contextlib

import ray
from verl.workers.rollout.sglang_rollout.async_sglang_server import SGLangHttpServer, SGLangReplica
from verl.workers.rollout.sglang_rollout.sglang_rollout import ServerAdapter

from soft_spatial.compat.sglang import collect_records, tensor_update_request
from soft_spatial.compat.verl.rollout import server_adapter_engine, to_ipc_device
from soft_spatial.engines.base import think_end_index, think_end_token
from soft_spatial.engines.sglang import SchedulerSetup, required_server_args
from soft_spatial.engines.sglang.client import (
    CONTROLLER_NAME,
    PARAM_KEY,
    PREFILL_ONLY,
    PromptPrefill,
    TraceAccumulator,
    encode_controller,
    request_params,
    split_records,
)
from soft_spatial.engines.sglang.server_args import CONTROLLER_LOADER
from soft_spatial.models.tokens import single_token_id, unusable_token_ids
from soft_spatial.softthink import ControllerState
from soft_spatial.softthink.noise import pop_noise_param, request_row_seed
from soft_spatial.softthink.settings import SoftSettings, sampling_config
from soft_spatial.softthink.trace import TRACE_FIELD

__all__ = ["SGLangSoftHttpServer", "SGLangSoftReplica", "SGLangSoftServerAdapter", "BACKEND",
           "scheduler_setup"]

BACKEND = "sglang_soft"


def scheduler_setup(settings: SoftSettings, hf_config, tokenizer) -> SchedulerSetup:
    """The scheduler processes' setup: the run's settings and what they need of the model."""
    text = getattr(hf_config, "text_config", hf_config)
    soft_thinking = settings.soft_thinking
    think_end = (single_token_id(tokenizer, soft_thinking.think_end) if soft_thinking.is_soft
                 else None)
    banned = unusable_token_ids(hf_config, tokenizer, int(text.vocab_size))
    return SchedulerSetup(soft=settings, hidden_size=int(text.hidden_size), think_end_id=think_end,
                          banned_ids=banned)


class SGLangSoftHttpServer(SGLangHttpServer):
    """verl's SGLang server with soft-thinking requests and records."""

    def __init__(self, config, model_config, *args, **kwargs):
        super().__init__(config, model_config, *args, **kwargs)
        # rollout.custom holds SoftSettings.to_dict(), written by the entry point (train.preflight)
        self.setup = scheduler_setup(SoftSettings.from_rollout(self.config),
                                     self.model_config.hf_config, self.model_config.tokenizer)
        # where a response closed its think block, in every mode (the soft switch is the setup's)
        self.think_end = think_end_token(self.model_config.tokenizer, self.setup.soft.soft_thinking)
        self._traces = TraceAccumulator()
        sgl_args = (self.config.engine_kwargs or {}).get("sglang") or {}
        # the n samples of a prompt share its prefill through the radix cache (PromptPrefill)
        self._prefill = None if sgl_args.get("disable_radix_cache") else PromptPrefill()

    async def launch_server(self, master_address: str = None, master_port: int = None):
        from soft_spatial.engines.sglang import hooks  # needs sglang: only in the server process
        self.setup.export()  # inherited by the spawned scheduler processes
        ek = self.config.engine_kwargs
        ek["sglang"] = required_server_args(ek.get("sglang"), self.setup.soft.density.fp32_logits)
        with hooks.plugin_schedulers():
            await super().launch_server(master_address, master_port)
        tm = getattr(self, "tokenizer_manager", None)
        if tm is not None and self.node_rank == 0:  # accumulate the records of every slice
            collect_records(tm, self._traces)

    async def generate(self, prompt_ids, sampling_params, request_id, image_data=None,
                       video_data=None, **kwargs):
        params = dict(sampling_params)
        key, _ = pop_noise_param(params)  # the noise key (soft agent loop, §2.2)
        sampling = sampling_config(params, self.config.response_length)
        seed = request_row_seed(self.setup.soft.seed, request_id if key is None else key)
        custom = dict(params.get("custom_params") or {})
        custom[PARAM_KEY] = request_params(seed, sampling)
        params["custom_params"] = custom
        params.pop("logprobs", None)  # log_probs are the records' likelihoods

        async def prefill():  # prompt only, once per group of samples in flight
            await super(SGLangSoftHttpServer, self).generate(
                prompt_ids, dict(PREFILL_ONLY), f"{request_id}-prefill", image_data=image_data,
                video_data=video_data)

        shared = (contextlib.nullcontext() if self._prefill is None else
                  self._prefill.prefilled(tuple(int(t) for t in prompt_ids), prefill))
        try:
            async with shared:
                out = await super().generate(prompt_ids, params, request_id,
                                             image_data=image_data, video_data=video_data,
                                             **kwargs)
        finally:
            acc = self._traces.pop(request_id)
        trace, loglik = split_records(acc, len(out.token_ids), request_id)
        out.log_probs = loglik
        out.extra_fields = dict(out.extra_fields or {})
        out.extra_fields[TRACE_FIELD] = trace
        out.extra_fields["soft_think_closed"] = think_end_index(out.token_ids,
                                                                self.think_end) is not None
        return out


class SGLangSoftReplica(SGLangReplica):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.server_class = ray.remote(SGLangSoftHttpServer)


class SGLangSoftServerAdapter(ServerAdapter):
    """Weight sync as verl's SGLang adapter, plus the AdaptSoft controller."""

    async def update_controller(self, state: ControllerState | None):
        if state is None:
            return
        engine = await server_adapter_engine(self)
        if engine is None:
            return
        tp = int(self.config.tensor_model_parallel_size * self.config.data_parallel_size)
        req = tensor_update_request([(CONTROLLER_NAME, to_ipc_device(encode_controller(state)))],
                                    copies=tp, load_format=CONTROLLER_LOADER, flush_cache=False)
        await engine.update_weights_from_tensor(req)
