"""The hybrid actor/rollout/ref worker with AdaptSoft (docs/design.md §5).

:class:`SoftActorRolloutRefWorker` subclasses verl's ``ActorRolloutRefWorker`` and changes only:

* on the CPU platform it opens the gloo process group itself (verl would build the invalid
  backend string ``cpu:gloo,cpu:gloo``);
* after ``init_model`` it configures the soft training engines of the actor and the ref
  (:class:`~soft_spatial.actor.train_engine.SoftFSDPEngine`: noise scale c, density variant),
  installs the soft PPO loss and, in ``adaptsoft`` mode, gives the actor's training engine an
  :class:`~soft_spatial.actor.adaptsoft_trainer.AdaptSoftTrainer` (controller, its AdamW, the
  alignment scaler; saved and restored with verl's checkpoints);
* after each weight sync it also sends the controller's weights to the rollout server (and, with
  ``SOFT_SPATIAL_CONTROLLER_LOG`` set, logs their fingerprint: ``softthink.controller.log_fingerprint``).

The soft settings arrive in ``actor_rollout_ref.rollout.custom`` as
:meth:`SoftSettings.to_dict <soft_spatial.softthink.settings.SoftSettings.to_dict>`, which the
entry point wrote there after parsing the user's block once (``train.preflight``); the servers
read the same dict.
"""
from __future__ import annotations

import os
from functools import partial
from pathlib import Path

from verl.single_controller.base.decorator import Dispatch, register
from verl.utils.device import get_device_id, get_device_name
from verl.workers.engine_workers import ActorRolloutRefWorker

from soft_spatial.actor.adaptsoft_trainer import AdaptSoftTrainer
from soft_spatial.compat.verl.engine import loss_config
from soft_spatial.infra.atomic import write_text
from soft_spatial.integration.platform import init_process_group
from soft_spatial.softthink import AdaptSoft, ControllerState
from soft_spatial.softthink.controller import log_fingerprint
from soft_spatial.softthink.settings import SoftSettings

__all__ = ["SoftActorRolloutRefWorker", "record_placement"]


def record_placement(role: str) -> dict:
    """Log where this rank runs and, when the entry point set ``SOFT_SPATIAL_RUN_DIR`` (the run
    directory), write it to ``<run dir>/workers/<role>-rank<R>.json`` (rank, world size, Ray node,
    host, pid): a record of the placement that does not depend on Ray forwarding worker logs."""
    import json
    import socket

    import ray

    info = {"role": role, "rank": int(os.environ.get("RANK", 0)),
            "world_size": int(os.environ.get("WORLD_SIZE", 1)),
            "node_id": ray.get_runtime_context().get_node_id(), "host": socket.gethostname(),
            "pid": os.getpid()}
    print(f"soft worker rank {info['rank']}/{info['world_size']} on node {info['node_id']}",
          flush=True)
    run_dir = os.environ.get("SOFT_SPATIAL_RUN_DIR")
    if run_dir:
        path = Path(run_dir) / "workers" / f"{str(role).replace('/', '_')}-rank{info['rank']}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text(path, json.dumps(info) + "\n")
    return info


class SoftActorRolloutRefWorker(ActorRolloutRefWorker):
    def __init__(self, config, role: str, **kwargs):
        if get_device_name() == "cpu":
            init_process_group(rank=int(os.environ.get("RANK", 0)),
                               world_size=int(os.environ.get("WORLD_SIZE", 1)),
                               init_method=os.environ.get("DIST_INIT_METHOD", "env://"))
        super().__init__(config, role, **kwargs)
        self.soft_settings = SoftSettings.from_rollout(self.config.rollout)
        record_placement(role)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def init_model(self):
        super().init_model()
        # imported once verl built the engines: verl's FSDP engine module reads the device at import
        from soft_spatial.actor.loss import check_actor_config, soft_ppo_loss
        from soft_spatial.actor.train_engine import SoftFSDPEngine
        s = self.soft_settings
        noise = s.soft_thinking.noise_scale if s.soft_thinking.noise_scale > 0 else None
        for worker in (self.actor, self.ref):
            train_engine = getattr(worker, "engine", None)  # verl's training engine of the role
            if isinstance(train_engine, SoftFSDPEngine):
                train_engine.configure_soft(noise_scale=noise, density=s.density, kl=s.kl)
        actor_engine = self.actor.engine if self.actor is not None else None  # verl's
        if isinstance(actor_engine, SoftFSDPEngine):
            if s.soft_thinking.mode == "adaptsoft":
                hidden = actor_engine.model_config.hf_config
                hidden = getattr(hidden, "text_config", hidden).hidden_size
                ctrl = AdaptSoft.from_config(s.adaptsoft, hidden)
                actor_engine.configure_soft(adaptsoft=AdaptSoftTrainer(  # on the policy's device
                    ctrl, s.alignment, seed=s.adaptsoft.seed, device=get_device_id()))
            actor_config = loss_config(self.loss_fn)
            check_actor_config(actor_config)
            self.loss_fn = partial(soft_ppo_loss, config=actor_config, kl=s.kl)
            self.actor.set_loss_fn(self.loss_fn)

    def controller_state(self) -> ControllerState | None:
        actor_engine = getattr(self.actor, "engine", None)  # verl's training engine
        trainer = getattr(actor_engine, "adaptsoft", None)
        if trainer is None:
            return None
        return trainer.controller.to_state()

    @register(dispatch_mode=Dispatch.ONE_TO_ALL, blocking=False)
    async def update_weights(self, global_steps: int = None, mode: str = "auto"):
        result = await super().update_weights(global_steps=global_steps, mode=mode)
        if self.rollout is not None and hasattr(self.rollout, "update_controller"):
            state = self.controller_state()
            if state is not None:  # what is sent, for the GPU kit's check (a no-op by default)
                log_fingerprint("trainer", state.weights, step=global_steps)
            await self.rollout.update_controller(state)
        return result
