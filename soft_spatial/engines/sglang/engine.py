"""SGLang 0.5.12 with the soft plugin behind :class:`~soft_spatial.engines.local.LocalEngine`'s
``generate`` interface (``python -m soft_spatial.eval engine=sglang``).

Prompts are rendered here exactly as the local engine renders them
(:func:`~soft_spatial.engines.prompts.render_chat`), sent to SGLang's offline ``Engine`` as token
ids (+ images) with each row's noise seed ``row_seed(seeds[i], j)`` in ``custom_params``, and the
per-step records that SGLang streams back are accumulated per request
(:func:`~soft_spatial.compat.sglang.collect_records`). So for the same logits every row
has the local engine's records, tokens and likelihoods.

The soft settings (mode, K, AdaptSoft checkpoint) are server-wide: they are fixed when the engine
starts, and ``generate(soft_thinking=...)`` must repeat them.
"""
from __future__ import annotations

import contextlib
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from soft_spatial.compat.sglang import collect_records
from soft_spatial.engines.base import (FINISH_LENGTH, FINISH_STOP, Completion, Prompt, check_prompt_ids,
                                       progress_bar, prompt_limit, prompt_seeds, think_end_index,
                                       think_end_token)
from soft_spatial.engines.prompts import load_image, render_chat
from soft_spatial.engines.sglang.client import (
    CONTROLLER_NAME,
    PARAM_KEY,
    PREFILL_ONLY,
    PromptPrefill,
    TraceAccumulator,
    collapse_image_pads,
    encode_controller,
    request_params,
    split_records,
)
from soft_spatial.engines.sglang.server_args import CONTROLLER_LOADER, SchedulerSetup, required_server_args
from soft_spatial.models.loading import load_processing
from soft_spatial.models.tokens import stop_token_ids, unusable_token_ids
from soft_spatial.softthink import (AdaptSoftConfig, ControllerState, DensityConfig, SamplingConfig, SoftThinkingConfig,
                                    SoftTrace)
from soft_spatial.softthink.noise import row_seed
from soft_spatial.softthink.settings import SoftSettings

__all__ = ["SGLangEngine"]


class SGLangEngine:
    """Soft/hard generation on SGLang (GPU); same ``generate`` contract as the local engine.

    Args:
        model_path: local model directory (SGLang loads the weights from it).
        soft_thinking: the server-wide soft-thinking settings.
        controller: AdaptSoft checkpoint (``mode="adaptsoft"``), loaded by every scheduler process.
        seed: base seed of requests that carry no seed (SGLang's own HTTP API).
        density: the per-step likelihood each completion's ``logprobs`` records, and with
            ``fp32_logits`` the output head in fp32 (SGLang's ``enable_fp32_lm_head``, set from
            it); default the exact density in the model's dtype.
        server_args: SGLang ``ServerArgs`` keywords (``tp_size``, ``dp_size``,
            ``mem_fraction_static``, ...); what soft decoding needs is added
            (:func:`~soft_spatial.engines.sglang.required_server_args`).
        backend: an already running engine with SGLang's ``Engine.generate`` signature and a
            ``tokenizer_manager`` (tests); by default one is launched.
        max_batch_rows: rows submitted to SGLang per call (SGLang schedules them itself; this only
            bounds the progress bar's granularity and the memory of one call's results).
        max_prompt_length: longest accepted prompt in tokens (default: the context length, SGLang's
            ``context_length`` or the model's, less ``max_new_tokens``); a longer one raises
            :class:`~soft_spatial.engines.PromptTooLongError` before anything is sent, as in
            the local engine, so evaluation skips and counts it.
    """

    def __init__(self, model_path: str | Path, soft_thinking: SoftThinkingConfig,
                 adaptsoft: AdaptSoftConfig | None = None,
                 controller: str | Path | None = None, seed: int = 0,
                 density: DensityConfig | None = None,
                 server_args: dict[str, Any] | None = None, backend=None,
                 max_batch_rows: int = 1024, max_prompt_length: int | None = None):
        from soft_spatial.engines.sglang import hooks  # needs sglang: fails here, with the install hint, without it

        if soft_thinking.mode == "adaptsoft" and controller is None:
            raise ValueError("mode 'adaptsoft' needs controller=<AdaptSoft checkpoint>")
        if controller is not None and not Path(controller).is_file():
            raise FileNotFoundError(f"AdaptSoft checkpoint {str(controller)!r} does not exist")
        self.model_path, self.max_batch_rows = str(model_path), max_batch_rows
        self.soft_thinking = soft_thinking
        config, self.processor, self.tokenizer = load_processing(model_path)
        text = getattr(config, "text_config", config)
        self.image_token_id = getattr(config, "image_token_id", None)
        self.max_prompt_length = max_prompt_length
        self.context_length = ((server_args or {}).get("context_length")
                               or getattr(text, "max_position_embeddings", None))
        gen = _generation_config(model_path)
        self.eos_ids = stop_token_ids(config, self.tokenizer, gen)
        self.think_end = think_end_token(self.tokenizer, soft_thinking)  # read in every mode
        self.setup = SchedulerSetup(
            soft=SoftSettings(soft_thinking=soft_thinking, adaptsoft=adaptsoft or AdaptSoftConfig(),
                              density=density or DensityConfig(), seed=seed),
            hidden_size=int(text.hidden_size),
            think_end_id=self.think_end if soft_thinking.is_soft else None,  # the soft switch
            banned_ids=unusable_token_ids(config, self.tokenizer, int(text.vocab_size)),
            controller_path=str(Path(controller).resolve()) if controller else None)
        self._traces = TraceAccumulator()
        self._owned = backend is None
        if backend is None:
            self.setup.export()  # read by the scheduler processes SGLang spawns
            args = required_server_args(server_args, self.setup.soft.density.fp32_logits)
            args.setdefault("model_path", self.model_path)
            backend = hooks.launch_engine(**args)
        self.backend = backend
        collect_records(backend.tokenizer_manager, self._traces)
        server_args = getattr(backend, "server_args", None)  # None: an injected stand-in
        self.prefix_cache = server_args is not None and not server_args.disable_radix_cache
        self._prefill = PromptPrefill()

    # -- prompts ------------------------------------------------------------------------------
    def prompt_limit(self, sampling: SamplingConfig) -> int:
        """Longest prompt (tokens) a request with ``sampling`` may have."""
        return prompt_limit(self.max_prompt_length, self.context_length, sampling)

    def prepare(self, i: int, prompt: Prompt, limit: int | None = None):
        """``(ids, images)`` of prompt ``i``: chats rendered like the local engine (placeholders
        expanded); ids (+ images) pass through. More than ``limit`` ids: PromptTooLongError."""
        if isinstance(prompt, dict):
            if "prompt_ids" not in prompt:
                raise ValueError(f"prompt {i}: a dict prompt needs 'prompt_ids'")
            ids = [int(t) for t in prompt["prompt_ids"]]
            images = [load_image(img, i) for img in prompt.get("images") or []]
        elif len(prompt) and isinstance(prompt[0], dict):
            ids, images, _ = render_chat(prompt, i, self.tokenizer, self.processor,
                                         self.image_token_id, self.model_path)
        elif all(isinstance(t, int) for t in prompt):
            ids, images = list(prompt), []
        else:
            raise TypeError(f"prompt {i}: expected a list of chat messages or of token ids")
        check_prompt_ids(i, ids, limit, self.context_length, self.max_prompt_length)
        n_pad = sum(1 for t in ids if t == self.image_token_id)
        if bool(n_pad) != bool(images):
            raise ValueError(f"prompt {i}: {n_pad} image placeholder tokens and "
                             f"{len(images)} images")
        return ids, images

    def request(self, ids: list[int], images: list, sampling: SamplingConfig, seed: int,
                rid: str) -> dict[str, Any]:
        """Keyword arguments of SGLang's ``Engine.generate`` / ``async_generate`` for one row
        (prompt ids from :meth:`prepare`, the row's noise seed, a unique request id)."""
        return {"input_ids": collapse_image_pads(ids, self.image_token_id),
                "image_data": list(images), "rid": rid,
                "sampling_params": {
                    "max_new_tokens": sampling.max_new_tokens,
                    "temperature": 0.0 if sampling.greedy else sampling.temperature,
                    "top_p": sampling.top_p, "top_k": sampling.top_k or -1,
                    "stop_token_ids": list(self.eos_ids), "ignore_eos": not self.eos_ids,
                    "skip_special_tokens": True,
                    "custom_params": {PARAM_KEY: request_params(seed, sampling)}}}

    # -- generation ---------------------------------------------------------------------------
    def generate(self, prompts: Sequence[Prompt],
                 soft_thinking: SoftThinkingConfig | None = None,
                 sampling: SamplingConfig | None = None, n: int = 1, seed: int = 0,
                 seeds: Sequence[int] | None = None, progress: bool = False
                 ) -> list[Completion]:
        """``n`` responses per prompt, prompt-major (prompt i's samples at ``i*n .. i*n+n-1``);
        row (i, j) draws its noise from ``row_seed(seeds[i], j)``, as in the local engine."""
        self._check_soft_thinking(soft_thinking)
        sampling = sampling or SamplingConfig()
        if n < 1:
            raise ValueError(f"n must be >= 1, got {n}")
        seeds = prompt_seeds(len(prompts), seed, seeds)
        limit = self.prompt_limit(sampling)
        prepared = [self.prepare(i, p, limit) for i, p in enumerate(prompts)]
        rows = [(i, j) for i in range(len(prompts)) for j in range(n)]
        tag = uuid.uuid4().hex[:12]
        outs: list[Completion] = []
        with progress_bar(progress, len(rows), "generate (sglang)") as advance:
            for s in range(0, len(rows), self.max_batch_rows):
                chunk = rows[s:s + self.max_batch_rows]
                reqs = [self.request(*prepared[i], sampling, row_seed(seeds[i], j),
                                     f"soft-{tag}-{i}-{j}") for i, j in chunk]
                try:
                    if self.prefix_cache and n > 1:  # see PromptPrefill
                        firsts = [r for (i, j), r in zip(chunk, reqs) if j == 0 or r is reqs[0]]
                        self._generate([dict(r, rid=r["rid"] + "-prefill",
                                             sampling_params=dict(PREFILL_ONLY)) for r in firsts])
                    results = self._generate(reqs)
                    if isinstance(results, dict):
                        results = [results]
                    outs += [self.completion(i, j, prepared[i][0], r["rid"], res)
                             for (i, j), r, res in zip(chunk, reqs, results)]
                finally:
                    for r in reqs:
                        self._traces.pop(r["rid"])
                advance(len(chunk))
        return outs

    def _generate(self, reqs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """SGLang's batch ``generate`` over requests made by :meth:`request`."""
        batch = {key: [r[key] for r in reqs] for key in reqs[0]}
        if not any(batch["image_data"]):  # ([] marks a text-only row among image rows: a
            batch["image_data"] = None  # None first entry makes SGLang wrap every row again)
        results = self.backend.generate(**batch)
        return [results] if isinstance(results, dict) else results

    async def generate_one(self, prompt: Prompt, sampling: SamplingConfig | None = None,
                           seed: int = 0, sample_index: int = 0, rid: str | None = None
                           ) -> Completion:
        """One row through SGLang's ``async_generate`` (run it on ``self.backend.loop``): the
        same result as row ``(0, sample_index)`` of ``generate([prompt], seeds=[seed])``.
        Concurrent calls are batched continuously by SGLang's scheduler."""
        sampling = sampling or SamplingConfig()
        ids, images = self.prepare(0, prompt, self.prompt_limit(sampling))
        rid = rid or f"soft-{uuid.uuid4().hex[:12]}-0-{sample_index}"
        req = self.request(ids, images, sampling, row_seed(seed, sample_index), rid)
        if not images:
            req["image_data"] = None

        async def prefill():
            await self.backend.async_generate(**dict(req, rid=rid + "-prefill",
                                                     sampling_params=dict(PREFILL_ONLY)))

        shared = (self._prefill.prefilled(tuple(req["input_ids"]), prefill)  # see PromptPrefill
                  if self.prefix_cache else contextlib.nullcontext())
        try:
            async with shared:
                res = await self.backend.async_generate(**req)
            return self.completion(0, sample_index, ids, rid, res)
        finally:
            self._traces.pop(rid)

    def completion(self, i: int, j: int, prompt_ids: list[int], rid: str, res: dict[str, Any]
                   ) -> Completion:
        """SGLang's result for request ``rid`` (prompt i, sample j) with its accumulated
        records, as the local engine's :class:`~soft_spatial.engines.base.Completion`."""
        tokens = [int(t) for t in res["output_ids"]]
        lists, loglik = split_records(self._traces.pop(rid), len(tokens), rid)
        trace = SoftTrace.from_lists(lists, k=self.soft_thinking.top_k)
        finish = (res.get("meta_info") or {}).get("finish_reason") or {}
        reason = finish.get("type") if isinstance(finish, dict) else str(finish)
        if reason == "abort":
            raise RuntimeError(f"SGLang aborted request {rid} (prompt {i}, sample {j}): "
                               f"{finish.get('message', finish)}")
        return Completion(prompt_index=i, sample_index=j, prompt_ids=list(prompt_ids),
                          token_ids=tokens,
                          text=self.tokenizer.decode(tokens, skip_special_tokens=True),
                          trace=trace, finish_reason=FINISH_STOP if reason == "stop"
                          else FINISH_LENGTH, think_end=think_end_index(tokens, self.think_end),
                          logprobs=loglik)

    def _check_soft_thinking(self, soft_thinking: SoftThinkingConfig | None) -> None:
        if soft_thinking is not None and soft_thinking != self.soft_thinking:
            raise ValueError(f"the SGLang engine was started with {self.soft_thinking}; "
                             f"soft settings are server-wide, got {soft_thinking}")

    # -- weights ------------------------------------------------------------------------------
    def update_weights(self, state_dict: dict[str, Any]) -> None:
        """Copy (a subset of) policy weights in, by their Hugging Face names (what verl's weight
        sync sends), through SGLang's ``update_weights_from_tensor``; the prefix cache is
        flushed (its KV was computed with the old weights)."""
        self._update([(k, v.detach()) for k, v in state_dict.items()], None, True)

    def set_controller(self, controller: ControllerState) -> None:
        """Install AdaptSoft's state in every scheduler process,
        through the plugin's custom weight loader (as training does); requests scheduled from
        now on use them."""
        self._update([(CONTROLLER_NAME, encode_controller(controller))], CONTROLLER_LOADER, False)

    def _update(self, named, load_format, flush_cache) -> None:
        ok, message = self.backend.update_weights_from_tensor(
            named_tensors=named, load_format=load_format, flush_cache=flush_cache)[:2]
        if not ok:
            raise RuntimeError(f"SGLang weight update failed: {message}")

    def close(self) -> None:
        """Shut SGLang down (only an engine this object launched)."""
        if self._owned and self.backend is not None:
            self.backend.shutdown()
            self.backend = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _generation_config(path):
    try:
        from transformers import GenerationConfig
        return GenerationConfig.from_pretrained(path)
    except (OSError, ValueError):
        return None
