"""``python -m soft_spatial.train``: soft GRPO with AdaptSoft through verl's trainer.

Composes verl's config tree (``pkg://verl.trainer.config``) with ``configs/train.yaml``; see that
file for the presets (``experiment=``, ``model=``, ``rollout=``, ``cluster=``). The plugin
(:mod:`soft_spatial.plugin`) is loaded in every Ray process through ``VERL_USE_EXTERNAL_MODULES``.

Before Ray starts, `preflight` checks what would otherwise fail late inside a worker: the soft
settings, the sampling temperatures, the actor's loss settings (a warning where they depart from
eq. 8 or break the controller's K-sparse gradient), the model directory (a tiny random model is
built only with ``model.build_tiny=true``) and the training data. The run directory (``trainer.default_local_dir``)
is locked for the run, its metrics log is kept across resumes, and a local Ray started here never
outlives the run (`soft_spatial.infra.ray_session`). A run whose latest checkpoint already
reached ``trainer.total_training_steps`` says so and exits without starting Ray. SIGTERM (Slurm at
the time limit or on preemption) ends a run as Ctrl-C does: Ray shut down, its processes ended,
the run directory unlocked with its last checkpoint to resume from, exit status 143 (130 for SIGINT).

``data.task_types=[Perspective_Taking]`` trains (and validates) on a task-type subset: the rows
of ``data.train_files``/``data.val_files`` of those task types (or sub-types) are written to
``<trainer.default_local_dir>/data/`` and verl reads those instead (the paper's Table 4 protocol).
"""
from __future__ import annotations

import os
import time
from pathlib import Path

from omegaconf import OmegaConf, open_dict

from soft_spatial.data.prepare import check_parquet
from soft_spatial.data.subsets import filter_parquet, normalise_task_types
from soft_spatial.infra import ray_session
from soft_spatial.infra.atomic import write_text
from soft_spatial.infra.dirlock import DirLock
from soft_spatial.infra.hydra_args import rename_argv
from soft_spatial.infra.hydra_record import hydra_record
from soft_spatial.infra.ray_env import plugin_env
from soft_spatial.infra.signals import command, reinstall
from soft_spatial.infra.run_dir import finished, keep_metrics_until, resume_step
from soft_spatial.models.loading import resolve_model_dir
from soft_spatial.softthink.settings import SETTINGS_FILE, SoftSettings

CONFIG_DIR = Path(__file__).resolve().parents[1] / "configs"
RUN_DIR_ENV = "SOFT_SPATIAL_RUN_DIR"


def cpu_workers(cores_per_worker: int, cap: int = 8) -> int:
    """Processes for one worker pool on this machine (``${cpu_workers:4}`` in the CPU preset): one
    per ``cores_per_worker`` cores this process may use, at least 1, at most ``cap`` (verl's
    default pool size)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, min(int(cap), (cores or 1) // int(cores_per_worker)))


OmegaConf.register_new_resolver("cpu_workers", cpu_workers, replace=True)


def _files(value) -> list:
    return [value] if isinstance(value, str) else list(value or [])


def preflight(cfg) -> Path:
    """Check the configuration before Ray starts; returns the model directory (written back to
    the config without a trailing "/"). Every error names the setting."""
    # the actor's module imports verl: after run() set the environment verl reads at import
    from soft_spatial.actor.loss import check_actor_config
    from soft_spatial.integration.consistency import check_rollout_correction

    rollout = cfg.actor_rollout_ref.rollout
    # parsed once, here (each invalid setting named); workers and servers read this dict
    settings = SoftSettings.from_rollout(rollout)
    with open_dict(cfg):
        rollout.custom = settings.to_dict()
    # warned here, where the user sees it (the worker checks verl's built actor config again)
    check_actor_config(cfg.actor_rollout_ref.actor)
    check_rollout_correction(cfg.get("algorithm"), settings.soft_thinking.is_soft)
    for key, value in (("actor_rollout_ref.rollout.temperature", rollout.get("temperature")),
                       ("actor_rollout_ref.rollout.val_kwargs.temperature",
                        rollout.get("val_kwargs", {}).get("temperature"))):
        if value is not None and not float(value) >= 0:
            raise ValueError(f"{key} must be >= 0 (0 = greedy), got {value}")
    model = resolve_model_dir(cfg.actor_rollout_ref.model.path,
                              build_tiny=bool(cfg.model.get("build_tiny")),
                              tiny_family=cfg.model.get("tiny_family", "qwen3_vl"))
    with open_dict(cfg):  # verl asserts on a trailing "/" (what shell completion leaves)
        if Path(str(cfg.model.get("path", ""))) == model:
            cfg.model.path = str(model)
        cfg.actor_rollout_ref.model.path = str(model)
    for key in ("train_files", "val_files"):
        for path in _files(cfg.data.get(key)):
            try:
                check_parquet(path)
            except FileNotFoundError as e:
                raise FileNotFoundError(f"data.{key}: {e}") from None
    return model


def task_subset_files(files, task_types, out_dir: Path, split: str, min_rows: int = 1) -> list:
    """Filtered copies of verl parquet ``files`` (a path or a list) holding only ``task_types``;
    fewer than ``min_rows`` rows in all is an error (verl would stop with an empty dataloader)."""
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


def run(cfg, record: dict[str, str] | None = None) -> None:
    """Train from a composed config (also used by tests): preflight → run directory → Ray's
    runtime environment → verl's ``run_ppo``. ``record`` (path under the run directory -> text:
    ``infra.hydra_record``) is written only once the run is accepted: a refused or finished command
    changes nothing."""
    env = plugin_env(str(cfg.trainer.get("device", "cuda")))
    os.environ.update(env)  # before verl's first import: it reads the plugin and the platform
    preflight(cfg)
    run_dir = Path(str(cfg.trainer.default_local_dir)).resolve()
    note = finished(resume_step(run_dir, str(cfg.trainer.resume_mode), cfg.trainer.get("resume_from_path")),
                    cfg.trainer.get("total_training_steps"), run_dir)
    if note:  # a finished run is a no-op: refused before the lock creates anything
        print(note)
        return
    with DirLock(run_dir, "training run directory"):
        metrics = open_run_dir(cfg, run_dir, env)
        if metrics is None:  # a finished run is a no-op: no Ray, nothing written
            return
        for rel, text in (record or {}).items():
            write_text(run_dir / rel, text)
        runtime_env(cfg, env)
        run_verl(cfg)
    print(f"checkpoints: {run_dir}\nmetrics: {metrics}")


def open_run_dir(cfg, run_dir: Path, env: dict) -> str | None:
    """The locked run directory made ready for this run: the step it resumes from, its metrics log
    kept up to that step, the task-type subsets, the settings file. Returns the metrics path, or
    None when the run already reached ``trainer.total_training_steps``."""
    metrics = os.environ.get("VERL_FILE_LOGGER_PATH", str(run_dir / "metrics.jsonl"))
    env["VERL_FILE_LOGGER_PATH"] = metrics
    env[RUN_DIR_ENV] = str(run_dir)  # workers record where they ran (integration.worker)
    os.environ.update(env)
    step = resume_step(run_dir, str(cfg.trainer.resume_mode), cfg.trainer.get("resume_from_path"))
    note = finished(step, cfg.trainer.get("total_training_steps"), run_dir)
    if note:
        print(note)
        return None
    moved = keep_metrics_until(metrics, step)
    if moved:
        print(f"{metrics}: {moved} line(s) logged after step {step} (the resumed checkpoint) "
              f"moved to metrics.superseded.jsonl")
    task_types = normalise_task_types(cfg.data.get("task_types"))
    if task_types:
        with open_dict(cfg):
            for key, split, least in (("train_files", "train", int(cfg.data.train_batch_size)),
                                      ("val_files", "val", 1)):
                cfg.data[key] = task_subset_files(cfg.data[key], task_types,
                                                  run_dir / "data", split, least)
    settings = SoftSettings.from_rollout(cfg.actor_rollout_ref.rollout)  # preflight's dict
    print("soft thinking settings (actor_rollout_ref.rollout.custom):\n"
          + OmegaConf.to_yaml(settings.to_dict()))
    # kept beside the checkpoints: python -m soft_spatial.export copies them to the model
    settings.save(run_dir / SETTINGS_FILE)
    return metrics


def runtime_env(cfg, env: dict) -> None:
    """Ray's runtime environment: the plugin environment for every Ray process; a local Ray
    started by this process ends with it (orphans of a killed run reaped first, a watchdog)."""
    with open_dict(cfg):
        ray_init = cfg.ray_kwargs.setdefault("ray_init", {})
        env_vars = ray_init.setdefault("runtime_env", {}).setdefault("env_vars", {})
        for k, v in env.items():
            env_vars.setdefault(k, v)
        if os.environ.get("RAY_ADDRESS") or ray_init.get("address"):
            # joining a running cluster (soft_spatial.launch): its resources are already set
            for key in ("num_cpus", "num_gpus", "include_dashboard", "object_store_memory"):
                ray_init.pop(key, None)
            return
    ray_session.reap_orphans()
    ray_dir = ray_session.run_ray_dir()
    os.environ[ray_session.RAY_TMPDIR] = str(ray_dir)  # inherited by every Ray process
    ray_session.start_watchdog(ray_dir)


def run_verl(cfg) -> None:
    """verl's ``run_ppo`` with the soft TaskRunner."""
    # imported here, after run() set the environment: verl reads it at its first import
    import ray

    from soft_spatial.plugin import register
    register()  # this driver too: the CPU platform before verl's trainer imports
    from verl.trainer.main_ppo import run_ppo

    from soft_spatial.integration.task_runner import SoftTaskRunner

    from soft_spatial.compat.ray import keep_sigterm_handler

    OmegaConf.resolve(cfg)  # ${cpu_workers:...} here: Ray's processes do not know the resolver
    with keep_sigterm_handler(reinstall):  # ray.init takes SIGTERM over; main()'s comes back
        run_ppo(cfg, task_runner_class=ray.remote(num_cpus=1)(SoftTaskRunner))


def main() -> None:
    import hydra

    @hydra.main(config_path=str(CONFIG_DIR), config_name="train", version_base=None)
    def _main(cfg) -> None:
        # Hydra's record (configs/train.yaml turns Hydra's own off), one directory per start
        run(cfg, record=hydra_record(cfg, f"hydra/{time.strftime('%Y-%m-%d_%H-%M-%S')}"))

    rename_argv()  # soft_thinking=... (the settings group's old name) reads as soft=...
    # SIGTERM (Slurm's time limit or preemption, timeout, kill) ends the run as Ctrl-C does
    with command("python -m soft_spatial.train",
                 "the run directory keeps its last checkpoint; the same command resumes from it"):
        _main()


if __name__ == "__main__":
    main()
