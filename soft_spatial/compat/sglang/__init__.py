"""The SGLang internals soft_spatial touches (sglang 0.5.12), one function per touch, by area.

The soft plugin itself (:mod:`soft_spatial.engines.sglang.hooks`) uses SGLang's plugin API
(``register_sampler_backend``, ``HookRegistry``) and these functions; every reference to an
SGLang private name, undocumented attribute or module-level seam is here, with the 0.5.12
location it relies on:

* :mod:`.sampler`: the ``Sampler`` methods the plugin's sampler calls;
* :mod:`.requests`: the requests and their pool (the radix cache's insertion flag, the pool's
  rows, where a request gives its slot back);
* :mod:`.scheduler`: the scheduler processes (their setup, their launch, overlap scheduling);
* :mod:`.ops`: which kernels the layers run (native ops, the head in fp32);
* :mod:`.graphs`, :mod:`.graph_log`: CUDA graphs with the plugin, and their replays counted;
* :mod:`.phases`: a decode step's phases timed and annotated;
* :mod:`.records`: records and weight updates on the server's side;
* :mod:`.checks`: the pinned version; :func:`check_internals` (here) asks each module what moved
  (``tests/sglang_real/test_compat_sglang.py`` runs it against the real modules).

Imports sglang only inside functions.
"""
from soft_spatial.compat.sglang import (graphs, ops, phases, records, requests, sampler,
                                        scheduler)
from soft_spatial.compat.sglang.checks import SUPPORTED_SGLANG, check_version
from soft_spatial.compat.sglang.graph_log import (GRAPH_LOG_ENV, graph_log_extra,
                                                  log_graph_decisions, read_graph_log)
from soft_spatial.compat.sglang.graphs import (capture_graphs_with_last_hidden, eager_reason,
                                               recapture_only_above_last, warn_eager_decodes)
from soft_spatial.compat.sglang.ops import NATIVE_OPS_ENV, native_ops_requested, use_native_ops
from soft_spatial.compat.sglang.phases import (PHASE_LOG_ENV, PHASES, read_phase_log,
                                               time_scheduler_phases)
from soft_spatial.compat.sglang.records import collect_records, tensor_update_request
from soft_spatial.compat.sglang.requests import (POOL_FREE_TARGET, forward_batch_request_pool,
                                                 protect_soft_kv, request_pool_rows,
                                                 worker_request_pool)
from soft_spatial.compat.sglang.sampler import (attach_logprobs, preprocess_logits,
                                                sync_token_ids_across_tp)
from soft_spatial.compat.sglang.scheduler import (launch_engine, native_scheduler_process,
                                                  scheduler_launch, scheduler_process_setup)

__all__ = ["SUPPORTED_SGLANG", "check_version", "check_internals", "preprocess_logits",
           "attach_logprobs", "sync_token_ids_across_tp", "protect_soft_kv", "request_pool_rows",
           "worker_request_pool", "forward_batch_request_pool", "POOL_FREE_TARGET",
           "NATIVE_OPS_ENV", "native_ops_requested", "use_native_ops",
           "capture_graphs_with_last_hidden", "recapture_only_above_last", "eager_reason",
           "warn_eager_decodes", "GRAPH_LOG_ENV", "graph_log_extra", "log_graph_decisions",
           "read_graph_log", "PHASE_LOG_ENV", "PHASES", "time_scheduler_phases",
           "read_phase_log", "scheduler_process_setup", "native_scheduler_process",
           "scheduler_launch", "launch_engine", "collect_records", "tensor_update_request"]


def check_internals() -> list:
    """Check every internal of this package against the installed sglang (needs sglang); return
    a list of problems (empty = OK)."""
    problems = []
    try:
        check_version()
    except ImportError as e:
        problems.append(str(e))
    for module in (sampler, records, scheduler, requests, graphs, phases, ops):
        problems += module.problems()
    return problems
