"""soft_spatial's verl plugin: imported in every Ray process through
``VERL_USE_EXTERNAL_MODULES=soft_spatial.plugin`` (or the ``verl.plugins`` entry point).

Registers, idempotently:
  * the CPU platform (selected with ``VERL_PLATFORM=cpu``) and verl's FSDP engines for ``cpu``;
  * the soft FSDP engine (model type ``soft_language_model``) and the ``soft_grpo`` policy loss;
  * the ``local_soft`` rollout backend (replica + weight-sync adapter);
  * the ``sglang_soft`` rollout backend (GPU; registered lazily: sglang is imported only when the
    backend is used);
  * the ``soft_thinking_agent`` agent loop.
"""
from __future__ import annotations

import os

from soft_spatial.integration import platform as _platform  # first: verl's engines read the device

if os.environ.get("VERL_PLATFORM") == _platform.PLATFORM_NAME:
    _platform.use_cpu_platform()

from verl.workers.rollout.replica import RolloutReplicaRegistry  # noqa: E402

from soft_spatial.compat.verl.rollout import register_rollout_adapter  # noqa: E402
import soft_spatial.actor.train_engine  # noqa: E402,F401  (registers soft_language_model)
import soft_spatial.actor.loss  # noqa: E402,F401  (registers soft_grpo)
import soft_spatial.rollout.agent_loop  # noqa: E402,F401  (registers soft_thinking_agent)
from soft_spatial.rollout.replica import BACKEND  # noqa: E402


def _load_local_soft():
    from soft_spatial.rollout.replica import LocalSoftReplica
    return LocalSoftReplica


RolloutReplicaRegistry.register(BACKEND, _load_local_soft)
register_rollout_adapter(BACKEND, "soft_spatial.rollout.replica.LocalSoftServerAdapter")


def _load_sglang_soft():
    from soft_spatial.rollout.sglang_server import SGLangSoftReplica
    return SGLangSoftReplica


RolloutReplicaRegistry.register("sglang_soft", _load_sglang_soft)
register_rollout_adapter("sglang_soft",
                         "soft_spatial.rollout.sglang_server.SGLangSoftServerAdapter")
