"""The embedded engine as a verl rollout backend named ``local_soft``.

* :class:`LocalSoftReplica` (verl ``RolloutReplica``): launches one :class:`LocalSoftServer` Ray
  actor per replica, with the run's :class:`~soft_spatial.softthink.settings.SoftSettings` (the
  ``to_dict`` the entry point wrote into ``rollout.custom``) as its argument; verl's load
  balancer sends it the agent loops' requests.
* :class:`LocalSoftServerAdapter` (verl ``BaseRollout``): lives in every training worker; on each
  weight sync the replica's leader rank forwards the full weights (and the AdaptSoft controller)
  to the replica's server actor. The other ranks consume the weight generator too, because FSDP
  gathers each tensor collectively.

Both are registered by :mod:`soft_spatial.plugin` under ``rollout.name=local_soft``.
"""
from __future__ import annotations

import os

import ray
import torch

from verl.workers.rollout.base import BaseRollout
from verl.workers.rollout.replica import RolloutReplica

from soft_spatial.compat.verl.rollout import set_replica_server
from soft_spatial.infra.ray_env import forwarded_env
from soft_spatial.softthink import ControllerState
from soft_spatial.softthink.settings import SoftSettings

from soft_spatial.rollout.server import LocalSoftServer

__all__ = ["LocalSoftReplica", "LocalSoftServerAdapter", "server_name", "BACKEND"]

BACKEND = "local_soft"


def server_name(replica_rank: int, suffix: str = "") -> str:
    return f"local_soft_server_{replica_rank}{suffix}"


def _model_path(model_config) -> str:
    path = getattr(model_config, "local_path", None) or getattr(model_config, "path", None)
    if path is None and hasattr(model_config, "get"):
        path = model_config.get("local_path") or model_config.get("path")
    if not path:
        raise ValueError("local_soft rollout: the model config has no path")
    return str(path)


class LocalSoftReplica(RolloutReplica):
    """One CPU (or single-device) server per replica; no tensor parallelism."""

    def rollout_worker_use_gpu(self) -> bool:
        return False

    async def launch_servers(self):
        cfg = self.config
        if cfg.tensor_model_parallel_size != 1 or cfg.pipeline_model_parallel_size != 1:
            raise ValueError("rollout.name=local_soft runs one process per replica: set "
                             "rollout.tensor_model_parallel_size=1 (and pipeline 1)")
        name = server_name(self.replica_rank, self.name_suffix)
        dtype = {"bfloat16": "bfloat16", "bf16": "bfloat16", "float16": "float16",
                 "fp16": "float16"}.get(str(getattr(cfg, "dtype", "float32")), "float32")
        server_cls = ray.remote(LocalSoftServer)
        server = server_cls.options(name=name, num_cpus=0, max_concurrency=self.max_concurrency,
                                    runtime_env={"env_vars": forwarded_env()}).remote(
            model_path=_model_path(self.model_config), response_length=cfg.response_length,
            prompt_length=cfg.prompt_length, settings=SoftSettings.from_rollout(cfg), dtype=dtype)
        await server.wake_up.remote()  # surfaces construction errors here
        self.servers = [server]
        set_replica_server(self, server, f"{BACKEND}://{name}")


class LocalSoftServerAdapter(BaseRollout):
    """Weight sync from a training worker to its replica's LocalSoftServer."""

    def __init__(self, config, model_config, device_mesh, replica_rank: int = -1, **kwargs):
        super().__init__(config, model_config, device_mesh)
        world = (self.config.tensor_model_parallel_size * self.config.data_parallel_size
                 * self.config.pipeline_model_parallel_size)
        rank = int(os.environ.get("RANK", "0"))
        self.replica_rank = rank // world if replica_rank == -1 else replica_rank
        self.is_leader = rank % world == 0
        self._server = None
        self.sleep_level = 2

    def _handle(self):
        if self._server is None:
            self._server = ray.get_actor(server_name(self.replica_rank))
        return self._server

    async def resume(self, tags: list[str]):
        return None

    async def release(self):
        return None

    async def update_weights(self, weights, wire_format: str = "named_tensors", **kwargs):
        if wire_format != "named_tensors":
            raise NotImplementedError(f"local_soft rollout only accepts named tensors, got "
                                      f"{wire_format!r}")
        state: dict[str, torch.Tensor] = {}
        for name, tensor in weights:  # every rank drains the (collective) generator
            if self.is_leader:
                state[name] = tensor.detach().to("cpu", copy=True)
        if self.is_leader and state:
            await self._handle().update_weights.remote(state)

    async def update_controller(self, state: ControllerState | None):
        """Send AdaptSoft's state to the server."""
        if self.is_leader and state is not None:
            await self._handle().set_controller.remote(state)
