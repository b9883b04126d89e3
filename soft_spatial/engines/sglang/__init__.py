"""SGLang 0.5.12 soft-rollout plugin (docs/design.md §1–3 inside SGLang's scheduler processes).

Importing this package never imports sglang. The pieces:

* :mod:`.server_args` — what a server starts with: the run's ``SoftSettings`` and what the server
  derives from the model (:class:`~.server_args.SchedulerSetup`), carried to the scheduler
  processes in one environment variable, and the SGLang server arguments soft decoding requires;
* :mod:`.runtime` — the scheduler-side logic with no sglang import: per-request state (noise
  seed and step counter, counter-based like :class:`~soft_spatial.engines.local.LocalEngine`,
  thinking flag, the next step's mixture), the batched call of
  :func:`~soft_spatial.engines.step.sample_step`, the decode input mixture Σ w_k E[ids_k] and
  the per-step records returned through ``customized_info``;
* :mod:`.client` — the verl-server side: per-request parameters, accumulation of the records
  across streamed chunks, the controller's wire format;
* :mod:`.hooks` — the plugin inside SGLang (version-checked; the SGLang internals it needs are
  functions of :mod:`soft_spatial.compat.sglang`): the
  ``soft_gumbel`` sampler backend, the two hooks, the controller weight loader, the
  ``run_scheduler_process`` wrapper, the scheduler launch seams and the record collection on the
  tokenizer-manager side. Importing it without sglang raises a clear ImportError;
* :mod:`.engine` — :class:`~.engine.SGLangEngine`, the local engine's ``generate`` on SGLang's
  offline engine (``python -m soft_spatial.eval engine=sglang``).
"""
from soft_spatial.compat.sglang import SUPPORTED_SGLANG

from soft_spatial.engines.sglang.server_args import SAMPLER_BACKEND, SchedulerSetup, required_server_args

__all__ = ["SchedulerSetup", "required_server_args", "install", "SAMPLER_BACKEND",
           "SUPPORTED_SGLANG"]


def install(setup=None):
    """Register the sampler backend and hooks in this (scheduler) process. Needs sglang."""
    from soft_spatial.engines.sglang import hooks
    return hooks.install(setup)
