"""CPU accommodations and instrumentation for SGLang 0.5.12, test process only (../README.md).

An SGLang general plugin (entry point ``sglang_cpu`` in ``../sglang_cpu-0.1.dist-info``), so
SGLang's own ``load_plugins()`` applies it in every process that starts an engine: the engine's
process (before ``ServerArgs`` is built), every scheduler process, and Ray actors that inherit
PYTHONPATH. It never touches what soft_spatial's plugin hooks.

* **Accommodation** — SGLang forces ``sampling_backend="pytorch"`` for ``device="cpu"``
  (``ServerArgs._handle_cpu_backends``: its flashinfer sampling kernels are CUDA-only). A backend
  named explicitly is kept instead (soft_gumbel is pure PyTorch), so the CPU server runs the same
  sampler a GPU server runs.
* **Instrumentation** — with ``SOFT_SPATIAL_SGLANG_BATCH_LOG=<file>`` in a scheduler's
  environment, every batch the scheduler runs is appended to the file as one JSON line:
  ``{"mode": "EXTEND"|"DECODE"|..., "rows": [[rid, len(output_ids), extend_input_len], ...]}``
  (what the continuous-batching and prefix-cache tests assert on).
"""
from __future__ import annotations

import json
import os

ACTIVE = False
BATCH_LOG_ENV = "SOFT_SPATIAL_SGLANG_BATCH_LOG"


def _keep_explicit_sampling_backend(original, self, *args, **kwargs):
    """AROUND ``ServerArgs._handle_cpu_backends``."""
    asked = self.sampling_backend
    out = original(self, *args, **kwargs)
    if asked is not None:
        self.sampling_backend = asked
    return out


def _log_batch(original, self, batch, *args, **kwargs):
    """AROUND ``Scheduler.run_batch(self, batch, ...)``."""
    path = os.environ.get(BATCH_LOG_ENV)
    if path and batch is not None and getattr(batch, "reqs", None):
        extend = batch.forward_mode.is_extend()
        rows = [[r.rid, len(r.output_ids), int(r.extend_input_len) if extend else 0]
                for r in batch.reqs]
        with open(path, "a") as f:
            f.write(json.dumps({"mode": batch.forward_mode.name, "rows": rows}) + "\n")
    return original(self, batch, *args, **kwargs)


def register() -> None:
    global ACTIVE
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType
    HookRegistry.register("sglang.srt.server_args.ServerArgs._handle_cpu_backends",
                          _keep_explicit_sampling_backend, HookType.AROUND)
    HookRegistry.register("sglang.srt.managers.scheduler.Scheduler.run_batch", _log_batch,
                          HookType.AROUND)
    ACTIVE = True
