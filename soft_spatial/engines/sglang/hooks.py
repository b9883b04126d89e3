"""The soft plugin inside SGLang (sglang 0.5.12, checked at import); the SGLang internals it
needs are named functions of :mod:`soft_spatial.compat.sglang`.

What is hooked, and why each server argument is required (``server_args.required_server_args``):

* **Sampler** — ``SoftGumbelSampler`` is registered as sampling backend ``soft_gumbel``
  (``register_sampler_backend``; ``create_sampler`` runs in ``ModelRunner.initialize``, so
  :func:`install` must run first in every scheduler process: :func:`run_scheduler_process` does
  that). It replaces SGLang's sampling for every row by :meth:`SoftRuntime.sample` and returns the
  records through ``LogitsProcessorOutput.customized_info`` (one list/float per row, appended per
  token to ``Req.customized_info`` and streamed as slices to the tokenizer manager).
* **AROUND ``TpModelWorker.forward_batch_generation``** — publishes the batch's ``Req`` objects
  (``ModelWorkerBatch.reqs``) for the sampler and the embedding hook, and asks for the last hidden
  states (``CaptureHiddenMode.LAST`` when nothing else asked for them; AdaptSoft's input is the
  final-norm hidden state that produced the logits).
* **BEFORE ``Qwen3LLMModel.forward``** — at decode, ``general_mm_embed_routine`` has computed the
  plain token embeddings; in the soft modes every row gets Σ_k w_k E[ids_k] from the decode-input
  buffers the sampler wrote (a discrete row's one-hot weights give its token's embedding exactly).
* **Custom weight loader** :func:`load_weights` — controller weights arrive as one uint8 tensor
  named ``client.CONTROLLER_NAME`` through ``update_weights_from_tensor(load_format=<this>)``,
  which SGLang runs in every TP worker; other names go to ``model.load_weights``.
* **Scheduler launch** — every scheduler process must run :func:`run_scheduler_process` (install,
  check the final server arguments, then SGLang's own). The offline engine takes it as the class
  attribute ``Engine.run_scheduler_process_func`` (:func:`launch_engine`); verl's
  ``SGLangHttpServer.launch_server`` reads the module attribute
  ``sglang.srt.entrypoints.engine.run_scheduler_process`` when it launches
  (:func:`plugin_schedulers` swaps it for the duration).
* **Records on the server side** — ``TokenizerManager.handle_loop`` passes every
  ``BatchStrOutput``/``BatchTokenIDOutput`` to ``self._handle_batch_output``, which keeps only the
  newest ``customized_info`` slice in ``meta_info``; :func:`collect_records` wraps that method on
  the instance so a :class:`~.client.TraceAccumulator` sees every slice first.
* **Prefix (radix) caching stays on** — :func:`protect_soft_kv` keeps every request that has taken
  a soft step out of the tree from its first decode step on, so the prompt's KV (inserted after
  the prefill; text and image tokens) is shared by the n samples of a prompt and by later
  requests, while KV computed from soft inputs is never inserted and never matched.

CUDA graphs work (``disable_cuda_graph`` is not forced; set it to compare): the decode inputs
come from the static per-slot table (:class:`~.slots.SlotTable`, ``[pool rows, K]`` ids and
weights written by the sampler, which runs after the forward, in a captured graph of its own:
:class:`~.sampler_graph.SamplerGraphs`, sized by :func:`sampler_graph_sizes`) gathered by the
graph runner's static ``req_pool_indices``; the embedding hook runs inside the captured forward
with no per-batch state; that each row read its own request's state is checked when the request
ends, by the records' noise steps (docs/sglang.md, "CUDA graphs").

Overlap scheduling (``disable_overlap_schedule=False``) is the user's choice; off by default.
SGLang then launches batch t+1 before it processes batch t's results, on the same scheduler
thread (and, on a GPU, the same forward stream), so the sampler of batch t has written its rows'
decode inputs before batch t+1's forward reads them. ``Req.output_ids`` lags one step, so a
request's noise step is its own counter (kept in its slot on the device); a re-prefill
(retraction) is recognised by an extend batch for a request that already sampled; a request that
finished at t and rides along in t+1 still owns its slot (SGLang frees it when it processes t)
and its row is discarded; the radix-cache protection is decided when SGLang inserts, not before
the first decode (the prompt's insertion comes after it). On the CPU overlap on equals off bit
for bit with the radix cache off; with it on, samples sharing a prompt read SGLang's other copy
(rounding) of the prompt's KV at their first decode (docs/sglang.md, "Overlap scheduling").
The sampler never reads the device on the host (thinking flags per slot on the device, records
copied to the host without blocking and read when SGLang processes the batch), so the scheduler
works while the device runs the batch.

Not supported in this version (rejected by ``required_server_args`` or at runtime):

* **Retraction / re-prefill after soft steps** raises :class:`SoftStateError` (hard requests
  resume at their output length).
* Grammars under overlap scheduling (SGLang samples them outside the forward), mixed chunks, DP
  attention, speculative decoding, pipeline parallelism, ``enable_return_hidden_states`` (SGLang
  would hold its graphs at FULL hidden states, and every soft decode batch, which asks for LAST,
  would run eagerly).

A decode batch that runs eagerly with graphs on logs one warning per reason and engine
(``compat.sglang.warn_eager_decodes``); a batch asking for no hidden states (NULL) replays the
LAST graphs without recapturing them (``compat.sglang.recapture_only_above_last``).

TP: every TP rank holds the same Req objects, draws the same noise and sees the same gathered
logits, so all ranks build the same mixtures; the embedding rows come from SGLang's
vocabulary-parallel embedding module (masked shards + all-reduce), exact like a plain lookup.
As for SGLang's own tokens, rank agreement relies on deterministic logits
(``SYNC_TOKEN_IDS_ACROSS_TP=1`` syncs the spine tokens, not the records).
"""
from __future__ import annotations

import inspect
import logging

try:
    from sglang.srt.layers.sampler import Sampler, register_sampler_backend
    from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType
except ImportError as exc:  # pragma: no cover - exercised by the no-sglang test
    raise ImportError(
        "soft_spatial.engines.sglang.hooks needs sglang==0.5.12 (GPU environment: bash "
        "scripts/setup_gpu.sh); the CPU default is rollout=local") from exc

import torch

from soft_spatial.compat import sglang as sgl_compat
from soft_spatial.compat.sglang import (POOL_FREE_TARGET, forward_batch_request_pool,
                                        request_pool_rows, worker_request_pool)
from soft_spatial.softthink.controller import log_fingerprint

from soft_spatial.engines.sglang.client import CONTROLLER_NAME, decode_controller
from soft_spatial.engines.sglang.runtime import (BatchContext, SoftRuntime, batch_context,
                                                 current_batch, last_hidden)
from soft_spatial.engines.sglang.server_args import (_REQUIRED, FP32_LM_HEAD, REFUSED, SAMPLER_BACKEND,
                                                     SchedulerSetup)

logger = logging.getLogger(__name__)

sgl_compat.check_version()  # the hook targets below are version-specific

TP_TARGET = "sglang.srt.managers.tp_worker.TpModelWorker.forward_batch_generation"
EMBED_TARGET = "sglang.srt.models.qwen3_vl.Qwen3LLMModel.forward"

_runtime: SoftRuntime | None = None
_embed_params: list | None = None


def runtime() -> SoftRuntime:
    global _runtime
    if _runtime is None:
        _runtime = SoftRuntime(SchedulerSetup.from_env())
    return _runtime


def set_runtime(rt: SoftRuntime | None) -> None:
    """Install a runtime explicitly (tests; normally built from the environment)."""
    global _runtime
    _runtime = rt


class SoftGumbelSampler(Sampler):
    """Sampling backend ``soft_gumbel``: every row through :meth:`SoftRuntime.sample`."""

    def forward(self, logits_output, sampling_info, return_logprob, top_logprobs_nums,
                token_ids_logprobs, positions):
        ctx = current_batch()
        if ctx is None:
            raise RuntimeError("soft_gumbel sampler called outside "
                               "TpModelWorker.forward_batch_generation (speculative decoding, "
                               "and grammars under overlap scheduling, are not supported)")
        logits = sgl_compat.preprocess_logits(self, logits_output.next_token_logits,
                                              sampling_info)
        b = logits.shape[0]
        hidden = last_hidden(logits_output.hidden_states, ctx, b)
        tokens, info = runtime().sample(ctx.reqs, logits, hidden, pool_rows=ctx.pool_rows,
                                        extend=not ctx.is_decode, slots=ctx.slots)
        logits_output.customized_info = {**(logits_output.customized_info or {}), **info}
        if ctx.forced_capture:
            logits_output.hidden_states = None  # nobody else asked for them
        if return_logprob:
            logprobs = torch.log_softmax(logits.float() / sampling_info.temperatures, dim=-1)
            sgl_compat.attach_logprobs(self, logits_output, logprobs, top_logprobs_nums,
                                       token_ids_logprobs, sampling_info, tokens)
        sgl_compat.sync_token_ids_across_tp(self, tokens, sampling_info)
        return tokens


def _tp_hook(original, *args, **kwargs):
    """AROUND TpModelWorker.forward_batch_generation(self, model_worker_batch, ...): publishes
    the batch (its Req objects, its request-pool slots) for the sampler, with no pass over its
    rows."""
    mwb = args[1] if len(args) > 1 else kwargs.get("model_worker_batch")
    if mwb is None or getattr(mwb, "reqs", None) is None:
        return original(*args, **kwargs)
    forced = False
    # Always LAST (AdaptSoft's input): one fixed mode, the one the graph runner captured with
    # (install: capture_graphs_with_last_hidden), so every decode batch replays a graph.
    if mwb.capture_hidden_mode in (None, CaptureHiddenMode.NULL):
        mwb.capture_hidden_mode = CaptureHiddenMode.LAST
        forced = True
    ctx = BatchContext(reqs=mwb.reqs, is_decode=mwb.forward_mode.is_decode(),
                       extend_seq_lens=getattr(mwb, "extend_seq_lens", None),
                       forced_capture=forced,
                       pool_rows=request_pool_rows(worker_request_pool(args[0])),
                       slots=getattr(mwb, "req_pool_indices", None))
    with batch_context(ctx):
        return original(*args, **kwargs)


def _free_hook(*args, **kwargs):
    """BEFORE ReqToTokenPool.free(self, req) (:data:`~soft_spatial.compat.sglang.POOL_FREE_TARGET`):
    the request leaves the pool (finished, aborted, retracted)."""
    req = args[1] if len(args) > 1 else kwargs.get("req")
    if req is not None and _runtime is not None:
        _runtime.release(req)
    return None


def _embed_hook(*args, **kwargs):
    """BEFORE Qwen3LLMModel.forward(self, input_ids, positions, forward_batch, input_embeds, ...):
    at decode, every row's input becomes Σ_k w_k E[ids_k] from the decode-input buffers, gathered
    by ``forward_batch.req_pool_indices`` (sglang 0.5.12: the batch's request-pool slots).

    Runs identically when SGLang's ``CudaGraphRunner`` captures its decode graphs (at start-up,
    outside any scheduler batch, and on recapture): it depends only on the forward batch's static
    tensors and the server-wide mode — no per-batch Python state, no host sync — so the captured
    graph replays the mixture read for whatever slots the runner copies into its buffers."""
    names = _embed_params
    bound = dict(zip(names, args))
    bound.update(kwargs)
    embeds, fb = bound.get("input_embeds"), bound.get("forward_batch")
    if embeds is None or fb is None or not fb.forward_mode.is_decode():
        return None
    model = bound["self"]
    new = runtime().decode_inputs(fb.req_pool_indices, model.embed_tokens, embeds,
                                  request_pool_rows(forward_batch_request_pool(fb)))
    if new is None:
        return None
    if "input_embeds" in kwargs:
        kwargs["input_embeds"] = new
    else:
        args = list(args)
        args[names.index("input_embeds")] = new
        args = tuple(args)
    return args, kwargs


def load_weights(model, named_tensors):
    """Custom weight loader (``load_format`` = this function's dotted path): the controller blob
    goes to this process's runtime, everything else to ``model.load_weights``."""
    rest = []
    for name, tensor in named_tensors:
        if name == CONTROLLER_NAME:
            runtime().set_controller(decode_controller(tensor))
            log_fingerprint("rollout", runtime().controller)  # what was installed (stage e)
        else:
            rest.append((name, tensor))
    if rest:
        model.load_weights(rest)


_installed = False


def install(setup: SchedulerSetup | None = None) -> SoftRuntime:
    """Register the sampler backend and the hooks in this process (idempotent); the runtime is
    built from ``setup``, else from the environment (:meth:`SchedulerSetup.from_env`)."""
    global _installed, _embed_params
    if setup is not None:
        set_runtime(SoftRuntime(setup))
    rt = runtime()
    if _installed:
        return rt
    from sglang.srt.models.qwen3_vl import Qwen3LLMModel
    _embed_params = list(inspect.signature(Qwen3LLMModel.forward).parameters)
    if "input_embeds" not in _embed_params or "forward_batch" not in _embed_params:
        raise ImportError(f"Qwen3LLMModel.forward has an unexpected signature {_embed_params}")
    register_sampler_backend(SAMPLER_BACKEND, SoftGumbelSampler)
    sgl_compat.capture_graphs_with_last_hidden()  # else no decode batch that asks LAST replays
    sgl_compat.recapture_only_above_last()  # else every batch asking NULL recaptures every graph
    sgl_compat.warn_eager_decodes(logger.warning)  # once per reason: graphs off in all but name
    HookRegistry.register(TP_TARGET, _tp_hook, HookType.AROUND)
    HookRegistry.register(EMBED_TARGET, _embed_hook, HookType.BEFORE)
    HookRegistry.register(POOL_FREE_TARGET, _free_hook, HookType.BEFORE)
    HookRegistry.apply_hooks()
    sgl_compat.graph_log_extra("sampler", lambda: dict(runtime().stats))
    _installed = True
    logger.info("soft_spatial SGLang plugin installed (mode %s)", rt.setup.soft.soft_thinking.mode)
    return rt


def check_server_args(server_args, setup: SchedulerSetup | None = None) -> None:
    """Raise unless SGLang's final (post-``__post_init__``) server arguments still decode softly
    (and, given the scheduler's ``setup``, compute the logits in the precision its settings say).

    ``ServerArgs`` silently resets ``sampling_backend`` to ``"pytorch"`` for ``device="cpu"`` or
    ``"hpu"`` and under deterministic inference (``enable_deterministic_inference`` or
    ``rl_on_policy_target``): the server would then sample plainly and return no soft records.
    """
    problems = []
    if setup is not None:
        want = setup.soft.density.fp32_logits
        if bool(getattr(server_args, FP32_LM_HEAD, False)) != want:
            problems.append(f"{FP32_LM_HEAD}={getattr(server_args, FP32_LM_HEAD, None)!r} "
                            f"(the soft settings' density.fp32_logits is {want}: the trainer "
                            f"would score other logits than the rollout sampled from)")
    if getattr(server_args, "sampling_backend", None) != SAMPLER_BACKEND:
        problems.append(f"sampling_backend={server_args.sampling_backend!r} (SGLang resets it for "
                        f"device={getattr(server_args, 'device', None)!r} and deterministic "
                        f"inference)")
    for key, value in _REQUIRED.items():
        if bool(getattr(server_args, key, value)) != value:
            problems.append(f"{key}={getattr(server_args, key)!r}")
    for key, why in REFUSED.items():
        if getattr(server_args, key, None):
            problems.append(f"{key}={getattr(server_args, key)!r} ({why})")
    if problems:
        raise RuntimeError(f"soft_spatial SGLang plugin: server arguments {problems} are not "
                           f"what soft decoding needs (sampling_backend={SAMPLER_BACKEND!r} and "
                           f"{_REQUIRED}); see soft_spatial.engines.sglang.required_server_args")


def sampler_graph_sizes(server_args) -> list[int] | None:
    """The batch sizes the sampler captures (SGLang's own ``cuda_graph_bs``, which its decode
    graphs are padded to), or None where SGLang captures no graphs (graphs off, not CUDA)."""
    if getattr(server_args, "disable_cuda_graph", False) or \
            str(getattr(server_args, "device", "cuda")) != "cuda" or \
            not torch.cuda.is_available():
        return None
    return list(getattr(server_args, "cuda_graph_bs", None) or []) or None


def run_scheduler_process(*args, **kwargs):
    """Drop-in ``run_scheduler_process_func``: installs the plugin in the (spawned) scheduler
    process (and native ops where ``$SOFT_SPATIAL_SGLANG_NATIVE_OPS`` asks:
    :func:`soft_spatial.compat.sglang.scheduler_process_setup`), checks the final server
    arguments, then runs SGLang's scheduler."""
    sgl_compat.scheduler_process_setup()
    rt = install()
    server_args = args[0] if args else kwargs.get("server_args")
    if server_args is not None:
        check_server_args(server_args, rt.setup)
        rt.use_graphs(sampler_graph_sizes(server_args))
    from sglang.srt.managers.scheduler import run_scheduler_process as _run
    return _run(*args, **kwargs)


# -- server side (the process that owns the TokenizerManager) ---------------------------------
def plugin_schedulers():
    """While active, SGLang launchers that read ``sglang.srt.entrypoints.engine.
    run_scheduler_process`` at call time (verl's ``SGLangHttpServer.launch_server``) start every
    scheduler through :func:`run_scheduler_process` (:func:`soft_spatial.compat.sglang.
    scheduler_launch`)."""
    return sgl_compat.scheduler_launch(run_scheduler_process)



def launch_engine(**server_args):
    """SGLang's offline ``Engine`` (same keyword arguments as ``ServerArgs``) whose scheduler
    processes run the plugin; the server arguments must already contain
    :func:`~.server_args.required_server_args` and the scheduler setup must be exported."""
    return sgl_compat.launch_engine(run_scheduler_process, **server_args)
