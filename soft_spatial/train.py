"""``python -m soft_spatial.train``: soft GRPO with AdaptSoft through verl's trainer.

Composes verl's config tree (``pkg://verl.trainer.config``) with ``configs/train.yaml``; see that
file for the presets (``experiment=``, ``model=``, ``rollout=``, ``cluster=``). The plugin
(:mod:`soft_spatial.plugin`) is loaded in every Ray process through ``VERL_USE_EXTERNAL_MODULES``.
"""
from __future__ import annotations

import os
from pathlib import Path

CONFIG_DIR = Path(__file__).resolve().parents[1] / "configs"
PLUGIN = "soft_spatial.plugin"


def _plugin_env(device: str) -> dict:
    """Environment every Ray process needs (set before verl is imported or Ray starts)."""
    mods = [m for m in os.environ.get("VERL_USE_EXTERNAL_MODULES", "").split(",") if m]
    env = {"VERL_USE_EXTERNAL_MODULES": ",".join(dict.fromkeys(mods + [PLUGIN])),
           "TOKENIZERS_PARALLELISM": "false"}
    if device == "cpu":
        env["VERL_PLATFORM"] = "cpu"
    return env


def run(cfg) -> None:
    """Start training from a composed config (also used by tests)."""
    from omegaconf import OmegaConf, open_dict

    device = str(cfg.trainer.get("device", "cuda"))
    env = _plugin_env(device)
    os.environ.update(env)
    import ray

    import soft_spatial.plugin  # noqa: F401
    from verl.trainer.main_ppo import run_ppo

    from soft_spatial.models import build_tiny_model
    from soft_spatial.trainer.task_runner import SoftTaskRunner

    model_path = Path(cfg.actor_rollout_ref.model.path)
    if not model_path.exists() and cfg.model.get("build_tiny"):
        print(f"building tiny {cfg.model.build_tiny} model at {model_path}")
        build_tiny_model(model_path, family=cfg.model.build_tiny, vocab="qwen")
    with open_dict(cfg):  # forward the plugin environment to every Ray process
        ray_init = cfg.ray_kwargs.setdefault("ray_init", {})
        runtime_env = ray_init.setdefault("runtime_env", {})
        env_vars = runtime_env.setdefault("env_vars", {})
        for k, v in env.items():
            env_vars.setdefault(k, v)
    print(OmegaConf.to_yaml(cfg.actor_rollout_ref.rollout.custom))
    run_ppo(cfg, task_runner_class=ray.remote(num_cpus=1)(SoftTaskRunner))


def main() -> None:
    import hydra

    @hydra.main(config_path=str(CONFIG_DIR), config_name="train", version_base=None)
    def _main(cfg) -> None:
        run(cfg)

    _main()


if __name__ == "__main__":
    main()
