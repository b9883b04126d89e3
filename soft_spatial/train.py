"""``python -m soft_spatial.train``: soft GRPO with AdaptSoft through verl's trainer.

Composes verl's config tree (``pkg://verl.trainer.config``) with ``configs/train.yaml``; see that
file for the presets (``experiment=``, ``model=``, ``rollout=``, ``cluster=``). The plugin
(:mod:`soft_spatial.plugin`) is loaded in every Ray process through ``VERL_USE_EXTERNAL_MODULES``.

``data.task_types=[Perspective_Taking]`` trains (and validates) on a task-type subset: the rows
of ``data.train_files``/``data.val_files`` of those task types (or sub-types) are written to
``<trainer.default_local_dir>/data/`` and verl reads those instead (the paper's Table 4 protocol).
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


def task_subset_files(files, task_types, out_dir: Path, split: str, min_rows: int = 1) -> list:
    """Filtered copies of verl parquet ``files`` (a path or a list) holding only ``task_types``;
    fewer than ``min_rows`` rows in all is an error (verl would stop with an empty dataloader)."""
    from soft_spatial.data.subsets import filter_parquet

    files = [files] if isinstance(files, str) else list(files)
    tag = "+".join(task_types)
    out, total = [], 0
    for i, f in enumerate(files):
        dst = out_dir / f"{split}{i}-{tag}.parquet"
        n = filter_parquet(f, dst, task_types)
        print(f"data.task_types={task_types}: {n} rows of {f} -> {dst}")
        out.append(str(dst))
        total += n
    if total < min_rows:
        raise ValueError(f"data.task_types={task_types}: {total} {split} rows, fewer than "
                         f"{min_rows} (data.train_batch_size); lower the batch size or add data")
    return out


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
    ckpt_dir = Path(str(cfg.trainer.default_local_dir)).resolve()
    env.setdefault("VERL_FILE_LOGGER_PATH",
                   os.environ.get("VERL_FILE_LOGGER_PATH", str(ckpt_dir / "metrics.jsonl")))
    os.environ.update(env)
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    from soft_spatial.data.subsets import normalise_task_types
    task_types = normalise_task_types(cfg.data.get("task_types"))
    if task_types:
        with open_dict(cfg):
            for key, split, least in (("train_files", "train", int(cfg.data.train_batch_size)),
                                      ("val_files", "val", 1)):
                cfg.data[key] = task_subset_files(cfg.data[key], task_types, ckpt_dir / "data",
                                                  split, least)
    with open_dict(cfg):  # forward the plugin environment to every Ray process
        ray_init = cfg.ray_kwargs.setdefault("ray_init", {})
        runtime_env = ray_init.setdefault("runtime_env", {})
        env_vars = runtime_env.setdefault("env_vars", {})
        for k, v in env.items():
            env_vars.setdefault(k, v)
        if os.environ.get("RAY_ADDRESS") or ray_init.get("address"):
            # joining a running cluster (scripts/ray_cluster.sh): its resources are already set
            for key in ("num_cpus", "num_gpus", "include_dashboard", "object_store_memory"):
                ray_init.pop(key, None)
    settings = OmegaConf.to_yaml(cfg.actor_rollout_ref.rollout.custom, resolve=True)
    print("soft thinking settings (actor_rollout_ref.rollout.custom):\n" + settings)
    # kept beside the checkpoints: python -m soft_spatial.export carries them to the model
    from soft_spatial.export import SETTINGS_FILE
    tmp = ckpt_dir / (SETTINGS_FILE + ".tmp")
    tmp.write_text(settings, encoding="utf-8")
    os.replace(tmp, ckpt_dir / SETTINGS_FILE)
    run_ppo(cfg, task_runner_class=ray.remote(num_cpus=1)(SoftTaskRunner))
    print(f"checkpoints: {ckpt_dir}\nmetrics: {env['VERL_FILE_LOGGER_PATH']}")


def main() -> None:
    import hydra

    @hydra.main(config_path=str(CONFIG_DIR), config_name="train", version_base=None)
    def _main(cfg) -> None:
        run(cfg)

    _main()


if __name__ == "__main__":
    main()
