"""verl's rollout side (verl 0.9.1, ``verl/workers/rollout/``): the adapter registry, the replica's
server fields and, for ``rollout.name=sglang_soft`` (``soft_spatial/rollout/sglang_server.py``), the
SGLang weight-sync internals; what soft_spatial touches beyond the documented seams.

* ``verl.workers.rollout.base._ROLLOUT_REGISTRY`` (``base.py`` L89–93): the map from
  ``(rollout.name, mode)`` to the weight-sync adapter's dotted path that ``get_rollout_class``
  reads; :func:`register_rollout_adapter` adds an entry (verl has no public registration call).
* ``RolloutReplica._server_handle`` / ``_server_address`` (``verl/workers/rollout/replica.py``
  L128–129, read by the public ``server_handle`` / ``server_address`` properties, L247–254): a
  replica's ``launch_servers`` sets them, as verl's own replicas do; :func:`set_replica_server`.
* The private ``_to_ipc_device`` (:func:`to_ipc_device`), ``ServerAdapter._engine``,
  ``_init_server_adapter`` and ``_is_server_tp_leader`` (:func:`server_adapter_engine`) of
  ``verl/workers/rollout/sglang_rollout/sglang_rollout.py`` (L61, L144, L208, L265), and the fact
  that ``SGLangHttpServer.launch_server`` reads
  ``sglang.srt.entrypoints.engine.run_scheduler_process`` at launch.

:mod:`.checks` fails loudly when any of these moves (the SGLang ones with sglang installed:
``check_sglang_internals``).
"""
from __future__ import annotations


def register_rollout_adapter(backend: str, adapter_path: str) -> None:
    """Make ``get_rollout_class(backend, "async")`` load the class at ``adapter_path`` (dotted).

    verl 0.9.1 keys the weight-sync adapters in the private module dict
    ``verl.workers.rollout.base._ROLLOUT_REGISTRY`` (``base.py`` L89) and has no registration call.
    """
    from verl.workers.rollout import base

    base._ROLLOUT_REGISTRY[(backend, "async")] = adapter_path


def set_replica_server(replica, handle, address: str) -> None:
    """Publish a launched server: verl 0.9.1's ``RolloutReplica`` exposes ``server_handle`` /
    ``server_address`` as properties over the private ``_server_handle`` / ``_server_address``
    (``replica.py`` L128–129, L247–254), which ``launch_servers`` is expected to set."""
    replica._server_handle = handle
    replica._server_address = address


def to_ipc_device(tensor):
    """verl's ``_to_ipc_device`` (0.9.1, ``sglang_rollout/sglang_rollout.py`` L61): a CPU tensor
    moved to the device (SGLang's IPC reduction needs device tensors). Imports sglang."""
    from verl.workers.rollout.sglang_rollout.sglang_rollout import _to_ipc_device

    return _to_ipc_device(tensor)


async def server_adapter_engine(adapter):
    """The HTTP adapter of verl's SGLang ``ServerAdapter`` if this rank is its server's TP leader,
    else None (verl 0.9.1, ``sglang_rollout.py``: ``await self._init_server_adapter()`` (L208),
    ``self._engine`` (L144) and ``self._is_server_tp_leader()`` (L265), as its
    ``update_weights`` uses them)."""
    await adapter._init_server_adapter()
    if adapter._engine is None or not adapter._is_server_tp_leader():
        return None
    return adapter._engine
