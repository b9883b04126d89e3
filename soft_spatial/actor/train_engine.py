"""The actor/ref training engine: verl's FSDP engine with soft replay and per-step likelihoods.

:class:`SoftFSDPEngine` subclasses verl 0.9.1's ``FSDPEngineWithLMHead`` and :func:`register` puts it in
verl's ``EngineRegistry`` under the model type ``soft_language_model`` (backends fsdp/fsdp2, devices
cuda/npu/cpu); select it with ``actor_rollout_ref.model.model_type=soft_language_model`` (the ref
policy shares the model config, so it gets the same treatment). A micro-batch without trace tensors
is handled exactly like the stock engine.

With the collated rollout records (``trace_*`` tensors ``[B, R, ...]``, aligned with verl's
response positions, docs/design.md §3) in the micro-batch:

* ``prepare_model_inputs`` lays the records out like ``input_ids`` (packed ``[1, nnz+pad]`` on the
  remove-padding path, ``[B, S]`` on the padded path). Record t of a response is the input its
  step fed back, i.e. it sits at the position of response token t (the input that produced step
  t+1). Every response position is replayed (discrete records give ``E[token]`` exactly), which
  also keeps the autograd graph the same on every rank. ``soft_inputs`` is installed around the
  forward; τ is the recorded one, or ``AdaptSoft.replay_temperature`` (straight-through, same
  value) when the controller is being trained.
* With ``DensityConfig.fp32_logits`` the model's output head computes in fp32 (autocast off:
  :func:`~soft_spatial.softthink.logits.fp32_head`), as the rollout's did; every micro-batch,
  with trace tensors or not.
* ``prepare_model_outputs`` returns as ``log_probs`` the per-step likelihood
  (:func:`~soft_spatial.softthink.step_log_likelihood`): at a soft step the Gumbel log-density of
  the recorded scores, at a discrete step the token log-prob, both at the rollout temperature. It is
  computed at response steps only (prompt positions hold 0: verl's losses read response positions
  only), so old, ref and current log-probs are the same quantity and verl's PPO machinery applies
  unchanged. With the ``candidates`` KL reading (:class:`~soft_spatial.softthink.KLConfig`) it
  also returns ``cand_logp`` ``[nnz, K]``, the soft steps' candidate log-probs.
* With an :class:`~soft_spatial.actor.adaptsoft_trainer.AdaptSoftTrainer` attached
  (:meth:`SoftFSDPEngine.configure_soft`), each training micro-batch runs the controller's
  alignment update after the loss and before verl's backward, and the controller steps with every
  policy optimizer step; its state rides along with the engine's checkpoints. Its time per
  micro-batch (``adaptsoft/alignment_s``) is measured only with ``SOFT_SPATIAL_ALIGNMENT_CLOCK=1``.

Limits (raise): fused kernels, Ulysses sequence parallelism, top-K distillation and
``calculate_sum_pi_squared`` together with trace tensors.
"""
from __future__ import annotations

import os
import time
from contextlib import ExitStack
from functools import partial

import torch
from torch import Tensor
from verl.utils import tensordict_utils as tu
from verl.workers.engine.fsdp.transformer_impl import FSDPEngineWithLMHead

from soft_spatial.actor.replay_layout import ReplayState, SoftBatch, scatter_rows, trace_layout
from soft_spatial.compat.verl.engine import as_language_model, no_cpu_offload_on_cpu, register_engine
from soft_spatial.models.tokens import unusable_token_ids
from soft_spatial.softthink import DensityConfig, KLConfig, SoftThinkingConfig, step_likelihood
from soft_spatial.softthink.logits import fp32_head
from soft_spatial.softthink.replay import soft_inputs
from soft_spatial.softthink.settings import CONTROLLER_FILE
from soft_spatial.softthink.trace import TRACE_PREFIX

__all__ = ["SoftFSDPEngine", "MODEL_TYPE", "register", "ALIGNMENT_CLOCK_ENV", "ADAPTSOFT_CKPT"]

MODEL_TYPE = "soft_language_model"
ADAPTSOFT_CKPT = CONTROLLER_FILE  # beside each checkpoint, and what export copies
ALIGNMENT_CLOCK_ENV = "SOFT_SPATIAL_ALIGNMENT_CLOCK"  # "1": report actor/adaptsoft/alignment_s


def alignment_clock_on() -> bool:
    """Whether ``$SOFT_SPATIAL_ALIGNMENT_CLOCK`` asks for ``adaptsoft/alignment_s``: off by default,
    because the clock synchronises the GPU twice per micro-batch (in a Ray worker the variable must
    be forwarded: ``SOFT_SPATIAL_FORWARD_ENV``)."""
    return os.environ.get(ALIGNMENT_CLOCK_ENV, "") not in ("", "0")


def _device_clock(device: torch.device) -> float:
    """``time.perf_counter()`` once the work queued on ``device`` has finished (the alignment
    time excludes the forward still running on a GPU when it starts)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


class SoftFSDPEngine(FSDPEngineWithLMHead):
    """``FSDPEngineWithLMHead`` with soft replay and per-step likelihoods (module docstring)."""

    # Soft settings, the dataclasses' defaults until configure_soft() sets the run's (§2.6).
    noise_scale: float = SoftThinkingConfig.noise_scale
    density: DensityConfig = DensityConfig()
    kl: KLConfig = KLConfig()
    adaptsoft = None  # an AdaptSoftTrainer while the controller is trained by this engine

    def configure_soft(self, noise_scale: float | None = None,
                       density: DensityConfig | None = None, adaptsoft=None,
                       kl: KLConfig | None = None) -> None:
        """Set the rollout noise scale c, the density variant, the KL reading (``candidates``
        adds ``cand_logp`` to the outputs) and (actor only) the controller's trainer. Call on
        every rank, before the first forward."""
        if noise_scale is not None:
            if noise_scale <= 0:
                raise ValueError(f"noise_scale must be > 0 to score soft steps, got {noise_scale}")
            self.noise_scale = float(noise_scale)
        if density is not None:
            self.density = density
        if kl is not None:
            self.kl = kl
        if adaptsoft is not None:
            self.adaptsoft = adaptsoft

    # -- model construction ------------------------------------------------------------------
    def _build_module(self):
        with as_language_model(self.model_config):
            return super()._build_module()

    def _build_fsdp_module(self, module):
        with no_cpu_offload_on_cpu(self.engine_config):
            return super()._build_fsdp_module(module)

    # -- forward -----------------------------------------------------------------------------
    def forward_step(self, micro_batch, loss_function, forward_only):
        self._soft_stack = ExitStack()
        self._soft_state: ReplayState | None = None
        trainer = self.adaptsoft
        if (loss_function is not None and not forward_only and trainer is not None
                and trainer.needs_loss_hook):
            loss_function = partial(self._loss_with_alignment, loss_function)
        try:
            if self.density.fp32_logits:  # the rollout's logits were fp32 too (DensityConfig)
                self._soft_stack.enter_context(fp32_head(self.module.get_output_embeddings()))
            loss, output = super().forward_step(micro_batch, loss_function, forward_only)
        finally:
            self._soft_stack.close()
            self._soft_state = None
        return loss, output

    def _loss_with_alignment(self, loss_function, model_output, data, dp_group=None):
        loss, metrics = loss_function(model_output=model_output, data=data, dp_group=dp_group)
        if self._soft_state is not None:
            metrics = dict(metrics)
            clock = alignment_clock_on()
            t0 = _device_clock(loss.device) if clock else 0.0
            metrics.update(self.adaptsoft.alignment_step(loss, self._soft_state, group=dp_group))
            if clock:
                metrics["adaptsoft/alignment_s"] = _device_clock(loss.device) - t0  # per micro-batch
        return loss, metrics

    def prepare_model_inputs(self, micro_batch):
        model_inputs, output_args = super().prepare_model_inputs(micro_batch)
        if TRACE_PREFIX + "topk_ids" not in micro_batch.keys():
            return model_inputs, output_args
        if tu.get_non_tensor_data(data=micro_batch, key="use_fused_kernels", default=False):
            raise NotImplementedError("soft replay needs materialised logits: set "
                                      "actor_rollout_ref.model.use_fused_kernels=false")
        if self.use_ulysses_sp:
            raise NotImplementedError("soft replay does not support Ulysses sequence parallelism")
        if tu.get_non_tensor_data(data=micro_batch, key="distillation_use_topk", default=False):
            raise NotImplementedError("soft replay does not support top-K distillation")
        remove_padding = tu.get_non_tensor_data(data=micro_batch, key="use_remove_padding",
                                                default=True)
        ids = model_inputs["input_ids"]
        sb = trace_layout(micro_batch, remove_padding=remove_padding, input_len=ids.shape[-1],
                          temperature=micro_batch["temperature"])
        tau, tau_upd, tau_leaf = sb.tau, None, None
        trainer = self.adaptsoft
        if trainer is not None and torch.is_grad_enabled():
            tau, tau_upd, tau_leaf = trainer.replay_tau(sb.ctrl_x, sb.u, sb.soft_mask, sb.tau)
        module = self.module
        embed = module.get_input_embeddings()
        state = ReplayState(batch=sb, tau_upd=tau_upd, tau_leaf=tau_leaf)
        stack = getattr(self, "_soft_stack", None)
        if stack is None:  # prepare_model_inputs called outside forward_step (e.g. a unit test)
            stack = self._soft_stack = ExitStack()
        if trainer is not None and trainer.needs_loss_hook and torch.is_grad_enabled():
            head = module.get_output_embeddings()

            def keep_hidden(mod, args):
                state.hidden = args[0]

            # prepend: capture h before FSDP2's pre-forward wraps the head's inputs in its
            # post-backward function (a backward from the wrapped tensor would run the head's
            # post-backward without its pre-backward and crash)
            stack.callback(head.register_forward_pre_hook(keep_hidden, prepend=True).remove)

        def at_inputs(values: Tensor) -> Tensor:  # values [n, ...] laid out like the inputs
            return scatter_rows(sb.embed_shape, sb.embed_rows, values)

        stack.enter_context(soft_inputs(
            embed, at_inputs(torch.ones_like(sb.soft_mask)), at_inputs(sb.topk_ids),
            at_inputs(sb.scores), at_inputs(tau), at_inputs(sb.soft_mask)))
        self._soft_state = state
        output_args["soft_replay"] = state
        return model_inputs, output_args

    def prepare_model_outputs(self, output, output_args, micro_batch, logits_processor_func):
        state = output_args.get("soft_replay")
        if state is None:
            return super().prepare_model_outputs(output, output_args, micro_batch,
                                                 logits_processor_func)
        if tu.get_non_tensor_data(data=micro_batch, key="calculate_sum_pi_squared", default=False):
            raise NotImplementedError("soft replay does not compute sum_pi_squared")
        sb: SoftBatch = state.batch
        logits = output.logits
        if not isinstance(logits, Tensor) or logits.is_nested:
            raise TypeError("soft replay expects dense logits from the model")
        from torch.distributed.tensor import DTensor

        if isinstance(logits, DTensor):
            logits = logits.full_tensor()
        logits = logits.reshape(-1, logits.shape[-1])
        d = self.density
        # no [n, V] fp32 copy: soft steps read their K candidate logits, discrete steps go through
        # a chunked log-softmax (GPU memory stays close to verl's stock log-prob computation)
        lik = step_likelihood(logits, sb.topk_ids, sb.scores, sb.soft_mask, sb.temperature,
                              self.noise_scale, d.reduce, d.clamp, d.min_logp, rows=sb.logit_rows,
                              banned=self._banned_ids(logits))
        loglik = lik.loglik
        cu = micro_batch["input_ids"].offsets()
        model_output = {"log_probs": torch.nested.nested_tensor_from_jagged(
            loglik.new_zeros(sb.nnz).index_put((sb.logprob_index,), loglik), cu)}
        if self.kl.over == "candidates":
            # log p̃^θ of the recorded candidates at soft steps (0 elsewhere), [nnz, K]: the
            # reference's copy travels to the loss as ref_cand_logp (candidate KL, §2.8)
            logp = lik.cand_logp
            rows = sb.logprob_index[lik.soft_rows]
            model_output["cand_logp"] = torch.nested.nested_tensor_from_jagged(
                logp.new_zeros(sb.nnz, logp.shape[-1]).index_put((rows,), logp), cu)
        if tu.get_non_tensor_data(data=micro_batch, key="calculate_entropy", default=False):
            ent = self._entropy(logits, sb)  # a diagnostic: every id counts, no gradient
            model_output["entropy"] = torch.nested.nested_tensor_from_jagged(
                ent.new_zeros(sb.nnz).index_put((sb.logprob_index,), ent), cu)
        state.likelihood = lik
        if state.hidden is not None:
            h = state.hidden
            state.hidden_steps = h.reshape(-1, h.shape[-1]).index_select(0, sb.logit_rows)
        return model_output

    def _entropy(self, logits: Tensor, sb: "SoftBatch", chunk_elements: int = 1 << 25) -> Tensor:
        """Entropy of softmax(ℓ/T) over every id at every response step. As a metric (no
        gradient) in row chunks; with a gradient (entropy_coeff ≠ 0) in one piece, as verl does."""
        if torch.is_grad_enabled():
            return self.compute_entropy_from_logits(
                logits.index_select(0, sb.logit_rows).float() / sb.temperature[:, None])
        n, step = sb.logit_rows.numel(), max(1, chunk_elements // logits.shape[-1])
        out = torch.empty(n, dtype=torch.float32, device=logits.device)
        for s in range(0, n, step):
            x = logits.index_select(0, sb.logit_rows[s:s + step]).float()
            out[s:s + step] = self.compute_entropy_from_logits(x / sb.temperature[s:s + step, None])
        return out

    def _banned_ids(self, logits: Tensor) -> Tensor:
        if getattr(self, "_banned", None) is None or self._banned.device != logits.device:
            mc = self.model_config
            ids = unusable_token_ids(mc.hf_config, mc.tokenizer, logits.shape[-1])
            self._banned = torch.tensor(ids, dtype=torch.long, device=logits.device)
        return self._banned

    # -- optimizer and checkpoints -------------------------------------------------------------
    def optimizer_zero_grad(self):
        super().optimizer_zero_grad()
        if self.adaptsoft is not None:
            self.adaptsoft.zero_grad()

    def optimizer_step(self):
        grad_norm = super().optimizer_step()
        if self.adaptsoft is not None:
            self._adaptsoft_metrics = self.adaptsoft.step(group=self.get_data_parallel_group())
        return grad_norm

    def train_batch(self, data, loss_function):
        self._adaptsoft_metrics = {}
        outputs = super().train_batch(data, loss_function)
        if self._adaptsoft_metrics and self.is_mp_src_rank_with_outputs():
            # verl's metrics are per-micro-batch lists (gathered over DP, then flattened)
            outputs["metrics"].update({k: [v] for k, v in self._adaptsoft_metrics.items()})
        return outputs

    def save_checkpoint(self, local_path, hdfs_path=None, global_step=0, max_ckpt_to_keep=None,
                        **kwargs):
        super().save_checkpoint(local_path, hdfs_path=hdfs_path, global_step=global_step,
                                max_ckpt_to_keep=max_ckpt_to_keep, **kwargs)
        if self.adaptsoft is not None:
            if torch.distributed.get_rank() == 0:
                os.makedirs(local_path, exist_ok=True)
                self.adaptsoft.save(os.path.join(local_path, ADAPTSOFT_CKPT))
            torch.distributed.barrier()

    def load_checkpoint(self, local_path, hdfs_path=None, del_local_after_load=True, **kwargs):
        # read the controller first: the base class may delete local_path after loading
        path = os.path.join(local_path, ADAPTSOFT_CKPT)
        if self.adaptsoft is not None and os.path.isfile(path):
            self.adaptsoft.load(path)
        super().load_checkpoint(local_path, hdfs_path=hdfs_path,
                                del_local_after_load=del_local_after_load, **kwargs)


def register() -> None:
    """Register :class:`SoftFSDPEngine` as ``soft_language_model`` (idempotent)."""
    register_engine(SoftFSDPEngine, MODEL_TYPE, ["fsdp", "fsdp2"], ["cuda", "npu", "cpu"])
