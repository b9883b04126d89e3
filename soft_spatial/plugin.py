"""soft_spatial's verl plugin: imported in every Ray process through
``VERL_USE_EXTERNAL_MODULES=soft_spatial.plugin`` (or the ``verl.plugins`` entry point).

:func:`register` makes every registration, one explicit call each, idempotently:
  * the CPU platform (selected with ``VERL_PLATFORM=cpu``) and verl's FSDP engines for ``cpu``;
  * the soft FSDP engine (model type ``soft_language_model``) and the ``soft_grpo`` policy loss;
  * the ``local_soft`` rollout backend (replica + weight-sync adapter);
  * the ``sglang_soft`` rollout backend (GPU; its classes load only when the backend is used, so
    sglang is imported only then);
  * the ``soft_thinking_agent`` agent loop.

verl imports this module by name and calls nothing in it, so importing it calls :func:`register`
once (the last line); every other process that needs the registrations calls it itself.
"""
from __future__ import annotations

import os

from soft_spatial.integration import platform

__all__ = ["register"]


def _load_local_soft():
    from soft_spatial.rollout.replica import LocalSoftReplica
    return LocalSoftReplica


def _load_sglang_soft():
    from soft_spatial.rollout.sglang_server import SGLangSoftReplica
    return SGLangSoftReplica


def register_rollout_backends() -> None:
    """``local_soft`` and ``sglang_soft``: verl's replica loaders and weight-sync adapters."""
    from verl.workers.rollout.replica import RolloutReplicaRegistry

    from soft_spatial.compat.verl.rollout import register_rollout_adapter
    from soft_spatial.rollout.replica import BACKEND

    RolloutReplicaRegistry.register(BACKEND, _load_local_soft)
    register_rollout_adapter(BACKEND, "soft_spatial.rollout.replica.LocalSoftServerAdapter")
    RolloutReplicaRegistry.register("sglang_soft", _load_sglang_soft)
    register_rollout_adapter("sglang_soft", "soft_spatial.rollout.sglang_server.SGLangSoftServerAdapter")


def register() -> None:
    """Every registration of the plugin, in order (idempotent: a second call changes nothing)."""
    if os.environ.get("VERL_PLATFORM") == platform.PLATFORM_NAME:
        platform.use_cpu_platform()  # selects it and registers verl's FSDP engines for cpu
    else:
        platform.register_platform()  # known to verl by name, never auto-detected
    # imported here, after the platform: verl's FSDP engine module reads the device at import
    from soft_spatial.actor import loss, train_engine
    from soft_spatial.rollout import agent_loop

    train_engine.register()
    loss.register()
    agent_loop.register()
    register_rollout_backends()


register()
