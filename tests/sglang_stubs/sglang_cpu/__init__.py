"""CPU accommodations and instrumentation for SGLang 0.5.12, test process only (../README.md).

An SGLang general plugin (entry point ``sglang_cpu`` in ``../sglang_cpu-0.1.dist-info``), so
SGLang's own ``load_plugins()`` applies it in every process that starts an engine: the engine's
process (before ``ServerArgs`` is built), every scheduler process, and Ray actors that inherit
PYTHONPATH. It never touches what soft_spatial's plugin hooks.

* **Accommodation** — SGLang forces ``sampling_backend="pytorch"`` for ``device="cpu"``
  (``ServerArgs._handle_cpu_backends``: its flashinfer sampling kernels are CUDA-only). A backend
  named explicitly is kept instead (soft_gumbel is pure PyTorch), so the CPU server runs the same
  sampler a GPU server runs.
* **Accommodation** — SGLang's weight sync serialises tensors with its CUDA-IPC reducer
  (``utils.patch_torch._reduce_tensor_modified``, installed by ``monkey_patch_torch_reductions``
  in verl's training workers and in the plugin's controller update), which reads a CUDA device
  index that a CPU tensor's reduction does not have (``IndexError``). CPU tensors travel by
  value instead (``torch.save`` bytes; the test models are tiny). Not torch's shared memory: the
  default file-descriptor strategy needs a connection to the sending process, which an SGLang
  scheduler reached over HTTP and ZMQ does not have, and the ``file_system`` strategy needs the
  sender's ``torch_shm_manager`` child, which ``Engine.shutdown`` kills with the rest of the
  process tree (``kill_process_tree(os.getpid(), include_parent=False)``), so every later update
  in that process failed with "Broken pipe". Applied when that module is imported
  (:func:`install_import_hooks`, from ``../sitecustomize.py``), since the training workers never
  run ``load_plugins()``.
* **Instrumentation** — with ``SOFT_SPATIAL_SGLANG_BATCH_LOG=<file>`` in a scheduler's
  environment, every batch the scheduler runs is appended to the file as one JSON line:
  ``{"mode": "EXTEND"|"DECODE"|..., "rows": [[rid, len(output_ids), extend_input_len], ...]}``
  (what the continuous-batching and prefix-cache tests assert on).
"""
from __future__ import annotations

import importlib.abc
import json
import os
import sys

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


def _cpu_tensor_reductions(patch_torch) -> None:
    """Wrap ``patch_torch._reduce_tensor_modified``: CUDA tensors keep SGLang's IPC reduction,
    CPU tensors travel by value: ``torch.save`` bytes that ``torch.storage._load_from_bytes`` (the
    loader torch's own storage pickling uses) reads back; a torch name, so SGLang's
    ``SafeUnpickler`` allows it."""
    import io

    import torch
    cuda_reduce = patch_torch._reduce_tensor_modified

    def reduce_tensor(tensor, *args, **kwargs):
        if tensor.is_cuda:
            return cuda_reduce(tensor, *args, **kwargs)
        buf = io.BytesIO()
        torch.save(tensor.detach(), buf)  # torch's own pickler: no shared memory, no recursion
        return torch.storage._load_from_bytes, (buf.getvalue(),)

    patch_torch._reduce_tensor_modified = reduce_tensor


_AFTER_IMPORT = {"sglang.srt.utils.patch_torch": _cpu_tensor_reductions}


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs ``_AFTER_IMPORT[name](module)`` right after module ``name`` is executed."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in _AFTER_IMPORT:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        exec_module = spec.loader.exec_module

        def exec_then_patch(module):
            exec_module(module)
            _AFTER_IMPORT[fullname](module)

        spec.loader.exec_module = exec_then_patch
        return spec


def install_import_hooks() -> None:
    if not any(isinstance(f, _AfterImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterImport())


def register() -> None:
    global ACTIVE
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType
    HookRegistry.register("sglang.srt.server_args.ServerArgs._handle_cpu_backends",
                          _keep_explicit_sampling_backend, HookType.AROUND)
    HookRegistry.register("sglang.srt.managers.scheduler.Scheduler.run_batch", _log_batch,
                          HookType.AROUND)
    ACTIVE = True
