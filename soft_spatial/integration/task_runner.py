"""TaskRunner for ``python -m soft_spatial.train``: verl's stock flow with the soft worker and
trainer classes swapped in (verl-recipe's dapo pattern)."""
from __future__ import annotations

import os
import socket

import ray
from omegaconf import OmegaConf
from verl.trainer.main_ppo_v0 import BaseTaskRunner
from verl.trainer.ppo.utils import need_critic, need_reference_policy
from verl.utils.config import validate_config

from soft_spatial.compat.verl.trainer import append_file_logger, cpu_pool_manager

__all__ = ["SoftTaskRunner"]


class SoftTaskRunner(BaseTaskRunner):
    def init_resource_pool_mgr(self, config):
        manager = super().init_resource_pool_mgr(config)
        from verl.utils.device import get_device_name
        return cpu_pool_manager(manager) if get_device_name() == "cpu" else manager

    def add_actor_rollout_worker(self, config):
        from verl.trainer.ppo.ray_trainer import Role

        # verl's workers (FSDP, CUDA) load in the TaskRunner process only, not in the driver
        from soft_spatial.integration.worker import SoftActorRolloutRefWorker

        actor_cls, group_cls = super().add_actor_rollout_worker(config)
        for role in (Role.ActorRollout, Role.ActorRolloutRef):
            if role in self.role_worker_mapping:
                self.role_worker_mapping[role] = ray.remote(SoftActorRolloutRefWorker)
        return SoftActorRolloutRefWorker, group_cls

    def run(self, config):
        # registrations: verl imports soft_spatial.plugin in this process at its first import
        # (VERL_USE_EXTERNAL_MODULES, forwarded to every Ray process by train.run)
        from verl.trainer.ppo.utils import create_rl_dataset, create_rl_sampler
        from verl.utils.config import omega_conf_to_dataclass
        from verl.utils.dataset.rl_dataset import collate_fn
        from verl.workers.config import HFModelConfig

        from soft_spatial.integration.ppo_trainer import SoftRayPPOTrainer  # as verl's workers

        print(f"SoftTaskRunner on {socket.gethostname()}, pid {os.getpid()}")
        append_file_logger()  # metrics.jsonl keeps the steps before a resume
        OmegaConf.resolve(config)
        _, group_cls = self.add_actor_rollout_worker(config)
        self.add_critic_worker(config)
        self.add_reward_model_resource_pool(config)
        self.add_teacher_model_resource_pool(config)
        validate_config(config=config, use_reference_policy=need_reference_policy(config),
                        use_critic=need_critic(config))
        model_config: HFModelConfig = omega_conf_to_dataclass(config.actor_rollout_ref.model)
        tok, proc = model_config.tokenizer, model_config.processor
        train = create_rl_dataset(config.data.train_files, config.data, tok, proc, is_train=True,
                                  max_samples=config.data.get("train_max_samples", -1))
        val = create_rl_dataset(config.data.val_files, config.data, tok, proc, is_train=False,
                                max_samples=config.data.get("val_max_samples", -1))
        trainer = SoftRayPPOTrainer(
            config=config, tokenizer=tok, processor=proc,
            role_worker_mapping=self.role_worker_mapping,
            resource_pool_manager=self.init_resource_pool_mgr(config),
            ray_worker_group_cls=group_cls, train_dataset=train, val_dataset=val,
            collate_fn=collate_fn, train_sampler=create_rl_sampler(config.data, train))
        trainer.init_workers()
        trainer.fit()
