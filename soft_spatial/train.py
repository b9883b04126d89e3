"""``python -m soft_spatial.train``: soft GRPO with AdaptSoft through verl's trainer.

Composes verl's config tree (``verl/trainer/config``, found by `verl_config_dir` without importing
verl) with ``configs/train.yaml``; see that file for the presets (``experiment=``, ``model=``,
``rollout=``, ``cluster=``). The plugin (:mod:`soft_spatial.plugin`) is loaded in every Ray
process through ``VERL_USE_EXTERNAL_MODULES``.

Before Ray starts, `preflight` checks what would otherwise fail late inside a worker: the soft
settings, the sampling temperatures, the actor's loss settings (a warning where they depart from
eq. 8 or break the controller's K-sparse gradient), the model directory (a tiny random model is
built only with ``model.build_tiny=true``; ``soft_thinking.top_k`` within its vocabulary), the
run directory (not a file) and the training data. The run directory (``trainer.default_local_dir``)
is locked for the run and keyed (`run_key`: a resume with another base model, other data files or
other training settings, the learning rate included, is refused naming each difference), its
metrics log is kept across resumes, and a local Ray started here never
outlives the run (`soft_spatial.infra.ray_session`). A run whose latest checkpoint already
reached ``trainer.total_training_steps`` says so and exits without starting Ray. SIGTERM (Slurm at
the time limit or on preemption) ends a run as Ctrl-C does: Ray shut down, its processes ended,
the run directory unlocked with its last checkpoint to resume from, exit status 143 (130 for SIGINT).

``data.task_types=[Perspective_Taking]`` trains (and validates) on a task-type subset: the rows
of ``data.train_files``/``data.val_files`` of those task types (or sub-types) are written to
``<trainer.default_local_dir>/data/`` and verl reads those instead (the paper's Table 4 protocol).
"""
from __future__ import annotations

import importlib.util
import json
import os
import sys
import time
from pathlib import Path

from omegaconf import OmegaConf, open_dict

from soft_spatial.data.prepare import check_parquet
from soft_spatial.data.subsets import count_rows, filter_parquet, normalise_task_types
from soft_spatial.compat.ray import loopback_only, reload_auth_settings
from soft_spatial.infra import ray_session
from soft_spatial.infra.ray_auth import token_auth
from soft_spatial.infra.atomic import write_text
from soft_spatial.infra.dirlock import DirLock, check_dir_path
from soft_spatial.infra.gc_imports import WORKER_SETUP_HOOK
from soft_spatial.infra.hydra_args import refuse_renamed
from soft_spatial.infra.hydra_record import hydra_record
from soft_spatial.infra.ray_env import plugin_env
from soft_spatial.infra.signals import command, reinstall
from soft_spatial.infra.provenance import (Keyed, OutputKeyMismatch, differences, path_digest,
                                           sha256_cache, tree_fingerprint)
from soft_spatial.infra.run_dir import (TRACKER, checkpoint_steps, finished, keep_metrics_until,
                                        resume_step, step_folder)
from soft_spatial.models.loading import check_top_k, resolve_model_dir
from soft_spatial.softthink.settings import CONTROLLER_FILE, SETTINGS_FILE, SoftSettings
from soft_spatial.softthink.settings import settings_file as run_settings_file

CONFIG_DIR = Path(__file__).resolve().parents[1] / "configs"
RUN_DIR_ENV = "SOFT_SPATIAL_RUN_DIR"


def register_recipes() -> None:
    """Training's ``recipe`` group (``recipe=synthetic_cpu``), kept beside the experiment that trains
    with it (configs/learning/recipe/): stored for Hydra when this module is imported."""
    from hydra.core.config_store import ConfigStore

    for path in sorted((CONFIG_DIR / "learning" / "recipe").glob("*.yaml")):
        ConfigStore.instance().store(group="recipe", name=path.stem, node=OmegaConf.load(path),
                                     package="_global_")


register_recipes()


def cpu_workers(cores_per_worker: int, cap: int = 8) -> int:
    """Processes for one worker pool on this machine (``${cpu_workers:4}`` in the CPU preset): one
    per ``cores_per_worker`` cores this process may use, at least 1, at most ``cap`` (verl's
    default pool size)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, min(int(cap), (cores or 1) // int(cores_per_worker)))


OmegaConf.register_new_resolver("cpu_workers", cpu_workers, replace=True)


def verl_config_dir() -> str:
    """verl's config tree (``verl/trainer/config``: ``${verl_config_dir:}`` in configs/train.yaml's
    Hydra search path), located without importing verl: ``pkg://verl.trainer.config`` imports the
    package, and verl's ``__init__`` imports torch and transformers (5 s of CPU), so a command
    refused for a bad argument waited for them (the checks of `preflight` import verl last)."""
    spec = importlib.util.find_spec("verl")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("verl is not installed: training composes verl's config tree")
    return str(Path(next(iter(spec.submodule_search_locations))) / "trainer" / "config")


OmegaConf.register_new_resolver("verl_config_dir", verl_config_dir, replace=True)
# a file of configs/ by its absolute path (``${config_file:load_balancer.yaml}``): what verl reads
# by path, wherever the command runs
OmegaConf.register_new_resolver("config_file", lambda name: str(CONFIG_DIR / name), replace=True)


def _files(value) -> list:
    return [value] if isinstance(value, str) else list(value or [])


def preflight(cfg, actor: bool = True) -> Path:
    """Check the configuration before Ray starts; returns the model directory (written back to
    the config without a trailing "/"). Every error names the setting. The actor's settings are
    checked last (`check_actor`; with ``actor=False`` left to the caller: `run` checks them once
    a finished run has been told apart): that check imports verl (seconds), which a refusal of
    anything else skips."""
    from soft_spatial.integration.consistency import check_rollout_correction

    rollout = cfg.actor_rollout_ref.rollout
    # parsed once, here (each invalid setting named); workers and servers read this dict
    settings = SoftSettings.from_rollout(rollout)
    with open_dict(cfg):
        rollout.custom = settings.to_dict()
    check_rollout_correction(cfg.get("algorithm"), settings.soft_thinking.is_soft)
    check_dir_path(str(cfg.trainer.default_local_dir), "trainer.default_local_dir")
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
    check_top_k(settings.soft_thinking.top_k, model)
    run_dir = Path(str(cfg.trainer.default_local_dir)).resolve()
    if run_dir == model.resolve() or run_dir.is_relative_to(model.resolve()):
        raise ValueError(f"trainer.default_local_dir={cfg.trainer.default_local_dir} lies inside "
                         f"model.path={model}: the run's checkpoints would become part of the base "
                         f"model's fingerprint (the run's key), and its resume would be refused as "
                         f"another model's; choose a run directory outside the model directory")
    for key in ("train_files", "val_files"):
        for path in _files(cfg.data.get(key)):
            try:
                check_parquet(path)
            except FileNotFoundError as e:
                raise FileNotFoundError(f"data.{key}: {e}") from None
    check_budget(cfg.trainer.get("total_training_steps"))
    task_types = normalise_task_types(cfg.data.get("task_types"))
    if task_types:  # counted here, written into the run directory once the run is accepted
        for files, split, least in _subsets(cfg):
            count_subset(cfg.data[files], task_types, split, least)
    if actor:
        check_actor(cfg)
    return model


def check_actor(cfg) -> None:
    """Warn about actor settings that depart from the method (``actor.loss.check_actor_config``),
    here, where the user sees it (the worker checks verl's built actor config again). The actor's
    module imports verl: after `run` set the environment verl reads at import."""
    # verl first, as in every Ray process: its __init__ loads the plugin (VERL_USE_EXTERNAL_MODULES),
    # which imports the actor's modules (first imported from one of them, it would find it half made)
    import verl  # noqa: F401

    from soft_spatial.actor.loss import check_actor_config

    check_actor_config(cfg.actor_rollout_ref.actor)


def check_budget(steps) -> None:
    """``trainer.total_training_steps``: a positive integer, or null (verl derives it from
    ``trainer.total_epochs`` and the data)."""
    if steps is not None and (isinstance(steps, bool) or not isinstance(steps, int) or steps < 1):
        raise ValueError(f"trainer.total_training_steps must be a positive integer (or null: "
                         f"trainer.total_epochs over the data), got {steps!r}")


def _subsets(cfg) -> list:
    """(data key, split name, least rows) of the task-type subsets: a training batch's worth of
    training rows, one validation row."""
    return [("train_files", "train", int(cfg.data.train_batch_size)), ("val_files", "val", 1)]


def count_subset(files, task_types, split: str, min_rows: int = 1) -> int:
    """The rows of verl parquet ``files`` (a path or a list) of ``task_types``, counted without
    writing anything; fewer than ``min_rows`` is an error (verl would stop with an empty
    dataloader), and so is a name that matches no row."""
    total = sum(count_rows(f, task_types) for f in _files(files))
    if total < min_rows:
        raise ValueError(f"data.task_types={task_types}: {total} {split} rows, fewer than "
                         f"{min_rows} (data.train_batch_size); lower the batch size or add data")
    return total


def task_subset_files(files, task_types, out_dir: Path, split: str, min_rows: int = 1) -> list:
    """Filtered copies of verl parquet ``files`` (a path or a list) holding only ``task_types``,
    written once `count_subset` accepted them (a refused subset writes nothing)."""
    count_subset(files, task_types, split, min_rows)
    tag = "+".join(task_types)
    out = []
    for i, f in enumerate(_files(files)):
        dst = out_dir / f"{split}{i}-{tag}.parquet"
        n = filter_parquet(f, dst, task_types)
        print(f"data.task_types={task_types}: {n} rows of {f} -> {dst}")
        out.append(str(dst))
    return out


# -- the run directory, checked before anything is written -------------------------------------
#: the key of what trained a run directory's checkpoints (infra.provenance; named when it held
#: the soft settings alone)
SETTINGS_KEY = "soft_settings.key.json"
#: settings of the rollout servers' batching and of the replay check: they change neither the
#: method nor what a checkpoint learned, so a resume may change them
NOT_IN_KEY = ("replay_check", "batch_window_s", "max_batch_rows", "stream_wait_s")
#: the training settings (beside the soft ones) that change what a run learns or the numbers it
#: logs: the optimizer (verl restores its state, learning rate included, from the checkpoint, so a
#: new value would be ignored or mixed in), the loss, GRPO's groups and batches, the sampling, the
#: reward, the data's selection and order, LoRA. Not keyed: trainer.total_training_steps (raised,
#: a run trains on), checkpoint and validation frequencies, logging, resources and parallelism,
#: dtypes and memory settings
TRAINING_KEY = (
    "data.train_max_samples", "data.max_prompt_length", "data.max_response_length",
    "data.train_batch_size", "data.shuffle", "data.seed", "data.filter_overlong_prompts",
    "data.truncation", "data.prompt_key", "data.image_key",
    "algorithm",
    "actor_rollout_ref.actor.optim", "actor_rollout_ref.actor.ppo_mini_batch_size",
    "actor_rollout_ref.actor.ppo_epochs", "actor_rollout_ref.actor.shuffle",
    "actor_rollout_ref.actor.data_loader_seed", "actor_rollout_ref.actor.policy_loss",
    "actor_rollout_ref.actor.clip_ratio", "actor_rollout_ref.actor.clip_ratio_low",
    "actor_rollout_ref.actor.clip_ratio_high", "actor_rollout_ref.actor.clip_ratio_c",
    "actor_rollout_ref.actor.loss_agg_mode", "actor_rollout_ref.actor.loss_scale_factor",
    "actor_rollout_ref.actor.entropy_coeff", "actor_rollout_ref.actor.use_kl_loss",
    "actor_rollout_ref.actor.kl_loss_coef", "actor_rollout_ref.actor.kl_loss_type",
    "actor_rollout_ref.actor.freeze_vision_tower",
    "actor_rollout_ref.model.lora_rank", "actor_rollout_ref.model.lora_alpha",
    "actor_rollout_ref.model.target_modules", "actor_rollout_ref.model.exclude_modules",
    "actor_rollout_ref.model.lora_adapter_path", "actor_rollout_ref.model.override_config",
    "actor_rollout_ref.model.custom_chat_template",
    "actor_rollout_ref.rollout.n", "actor_rollout_ref.rollout.temperature",
    "actor_rollout_ref.rollout.top_k", "actor_rollout_ref.rollout.top_p",
    "actor_rollout_ref.rollout.do_sample", "actor_rollout_ref.rollout.val_kwargs",
    "reward.custom_reward_function",
)


def _plain(value):
    return OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value


def run_key(cfg) -> dict:
    """The key of the checkpoints a run directory holds (`infra.provenance`): the soft settings
    (but `NOT_IN_KEY`), the training settings of `TRAINING_KEY` and the task-type subset, and the
    inputs by content: the base model's fingerprint (every byte of its directory: the reference
    policy, tokenizer and config a resume reads again), the digest of every file of
    ``data.train_files`` and ``data.val_files`` (in order) and of a reward function given as a file.
    No path is keyed: a run resumed where its files moved is the same run."""
    settings = SoftSettings.from_rollout(cfg.actor_rollout_ref.rollout)  # preflight's dict
    training = {name: _plain(OmegaConf.select(cfg, name)) for name in TRAINING_KEY}
    training["data.task_types"] = normalise_task_types(cfg.data.get("task_types"))
    reward = str(OmegaConf.select(cfg, "reward.custom_reward_function.path") or "")
    with sha256_cache() as cache:
        inputs = {"model": {"fingerprint": tree_fingerprint(str(cfg.actor_rollout_ref.model.path), cache)},
                  "data": {key: [path_digest(f, cache) for f in _files(cfg.data.get(key))]
                           for key in ("train_files", "val_files")}}
        if reward and Path(reward).is_file():
            inputs["reward"] = {"sha256": path_digest(reward, cache)}
    method = {k: v for k, v in settings.to_dict().items() if k not in NOT_IN_KEY}
    return json.loads(json.dumps({"settings": {"soft": method, "training": training},
                                  "inputs": inputs}))


def keyed(run_dir: Path, key: dict) -> Keyed:
    """The checkpoints of ``run_dir`` and their key (`run_key`, in `SETTINGS_KEY`)."""
    return Keyed("the training run", run_dir, key, at=run_dir / SETTINGS_KEY, hint=(
        "A run directory holds one run: resume it with the model, data and settings that trained "
        "it (trainer.total_training_steps may change: a run trains on), or train these into a new "
        "trainer.default_local_dir; nothing was changed"))


def check_settings(run_dir: Path, key: dict) -> None:
    """Refuse to train into ``run_dir`` with another model, other data or other settings than
    those that trained its checkpoints (`run_key`; resumed or overwritten, they would mix two runs
    in one, and an export would carry the wrong settings): an ``OutputKeyMismatch`` naming each
    setting or input that differs. A key of the soft settings alone (written before the model,
    the data and the training settings were keyed) is refused, saying so. A run from before keys
    were kept is compared with its ``soft_settings.yaml`` (the rest could not be, which is said);
    a directory without checkpoints takes this key."""
    if not (run_dir / TRACKER).is_file() and not checkpoint_steps(run_dir):
        return
    run = keyed(run_dir, key)
    path, recorded = run.key_path, run.recorded()
    if recorded is not None and "training" not in (recorded.get("settings") or {}):
        raise OutputKeyMismatch(
            f"{path} keys the soft settings only (written before the model, the data and the "
            f"training settings were keyed): what else trained the checkpoints in {run_dir} is "
            f"unknown, so a resume could mix two runs. Train into a new trainer.default_local_dir, "
            f"or, if the model, data and settings are these, delete {path}: the run is then "
            f"compared with its {SETTINGS_FILE} and keyed anew; nothing was changed")
    if recorded is not None:
        run.verdict()  # the same key, or refused naming each difference
        return
    old = run_settings_file(run_dir)
    if old is None:
        return
    method = {k: v for k, v in SoftSettings.load(old).to_dict().items() if k not in NOT_IN_KEY}
    diff = differences({"soft": method}, {"soft": key["settings"]["soft"]})
    if diff:
        raise OutputKeyMismatch(
            f"the checkpoints in {run_dir} were trained with other soft settings than these; what "
            f"differs (recorded in {old} -> requested):\n  " + "\n  ".join(diff) + f"\n{run.hint}")
    print(f"note: {run_dir} has no key (written before keys were kept): its soft settings match "
          f"{old}; the model, the data and the training settings could not be compared and are "
          f"keyed from now on ({path})")


def check_controller(folder: Path, settings: SoftSettings) -> None:
    """An adaptsoft run resumes its controller from ``<folder>/actor/adaptsoft.pt``: a missing or
    unreadable one is refused naming it (the worker would restart the controller from scratch, or
    fail once Ray started)."""
    if settings.soft_thinking.mode != "adaptsoft":
        return
    from soft_spatial.actor.adaptsoft_trainer import read_state

    path = folder / "actor" / CONTROLLER_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: the checkpoint of an adaptsoft run must hold its "
                                f"trained controller to resume from it")
    read_state(path)


def check_resume(cfg, run_dir: Path, key: dict | None = None) -> int | None:
    """What the run directory says about this run, read only (nothing written, Ray not started):
    the step it resumes from, or None when it already reached ``trainer.total_training_steps``
    (the note printed). Refuses a tracker that is garbled or names a missing checkpoint, another
    key than the checkpoints' (``key``: this run's `run_key`, made here when not given), and a
    resumed adaptsoft checkpoint without a whole controller."""
    trainer = cfg.trainer
    mode, path = str(trainer.resume_mode), trainer.get("resume_from_path")
    step = resume_step(run_dir, mode, path)
    settings = SoftSettings.from_rollout(cfg.actor_rollout_ref.rollout)  # preflight's dict
    key = key if key is not None else run_key(cfg)
    for directory in dict.fromkeys([run_dir] + ([step_folder(path)[0].parent] if mode == "resume_path" else [])):
        check_settings(directory, key)
    note = finished(step, trainer.get("total_training_steps"), run_dir)
    if note:
        print(note)
        return None
    if step:
        check_controller(step_folder(path)[0] if mode == "resume_path" else run_dir / f"global_step_{step}",
                         settings)
    return step


def run(cfg, record: dict[str, str] | None = None) -> None:
    """Train from a composed config (also used by tests): preflight → run directory → Ray's
    runtime environment → verl's ``run_ppo``. ``record`` (path under the run directory -> text:
    ``infra.hydra_record``) is written only once the run is accepted: a refused or finished command
    changes nothing."""
    env = plugin_env(str(cfg.trainer.get("device", "cuda")))
    os.environ.update(env)  # before verl's first import: it reads the plugin and the platform
    preflight(cfg, actor=False)
    run_dir = Path(str(cfg.trainer.default_local_dir)).resolve()
    if check_resume(cfg, run_dir) is None:  # a finished run is a no-op: before the lock creates anything
        return  # (and before verl's import: it says so in seconds)
    if not joins_cluster(cfg):  # a local Ray's directory that is not this user's alone: refused here
        ray_session.private_dir(ray_session.runs_root())
    with DirLock(run_dir, "training run directory"):
        metrics = open_run_dir(cfg, run_dir, env)
        if metrics is None:  # a finished run is a no-op: no Ray, nothing written
            return
        for rel, text in (record or {}).items():
            write_text(run_dir / rel, text)
        local = runtime_env(cfg, env)  # a local Ray's head starts meanwhile (seconds)
        try:
            # the actor's check imports verl (5-7 s of CPU): while the head starts, not before
            check_actor(cfg)
            if local is not None:
                join_local(cfg, local)
            run_verl(cfg)
        finally:
            if local is not None:
                local.stop()  # the driver left it, its every process ended, its directory removed
    print(f"checkpoints: {run_dir}\nmetrics: {metrics}")


def open_run_dir(cfg, run_dir: Path, env: dict) -> str | None:
    """The locked run directory made ready for this run: checked again (another command may have
    changed it meanwhile), its metrics log kept up to the step it resumes from, the task-type
    subsets, the settings file and the run's key. Returns the metrics path, or None when the run
    already reached ``trainer.total_training_steps``."""
    key = run_key(cfg)  # of the data as given, before the task-type subsets replace it
    step = check_resume(cfg, run_dir, key)
    if step is None:
        return None
    metrics = os.environ.get("VERL_FILE_LOGGER_PATH", str(run_dir / "metrics.jsonl"))
    env["VERL_FILE_LOGGER_PATH"] = metrics
    env[RUN_DIR_ENV] = str(run_dir)  # workers record where they ran (integration.worker)
    os.environ.update(env)
    moved = keep_metrics_until(metrics, step)
    if moved:
        print(f"{metrics}: {moved} line(s) logged after step {step} (the resumed checkpoint) "
              f"moved to metrics.superseded.jsonl")
    task_types = normalise_task_types(cfg.data.get("task_types"))
    if task_types:
        with open_dict(cfg):
            for files, split, least in _subsets(cfg):
                cfg.data[files] = task_subset_files(cfg.data[files], task_types, run_dir / "data", split, least)
    settings = SoftSettings.from_rollout(cfg.actor_rollout_ref.rollout)  # preflight's dict
    print("soft thinking settings (actor_rollout_ref.rollout.custom):\n"
          + OmegaConf.to_yaml(settings.to_dict()))
    # kept beside the checkpoints (each checkpoint gets its own copy: integration.ppo_trainer);
    # python -m soft_spatial.export copies them to the model
    settings.save(run_dir / SETTINGS_FILE)
    keyed(run_dir, key).record()
    return metrics


def joins_cluster(cfg) -> bool:
    """Whether the run joins a running Ray cluster (``RAY_ADDRESS``, ``ray_kwargs.ray_init.address``:
    the launcher's) instead of starting a local one."""
    return bool(os.environ.get("RAY_ADDRESS") or cfg.get("ray_kwargs", {}).get("ray_init", {}).get("address"))


def runtime_env(cfg, env: dict) -> ray_session.LocalRay | None:
    """Ray's runtime environment: the plugin environment for every Ray process. Without a cluster
    address the run starts its local Ray here (`ray_session.start_local`: a tethered head that ends
    with the run, its orphans from a killed run reaped first), listening on this machine only, with
    the run's own token, and returns it at once, still starting: `join_local` waits for it and
    points the driver at it, which then joins it as a client."""
    with open_dict(cfg):
        ray_init = cfg.ray_kwargs.setdefault("ray_init", {})
        runtime = ray_init.setdefault("runtime_env", {})
        env_vars = runtime.setdefault("env_vars", {})
        for k, v in env.items():
            env_vars.setdefault(k, v)
        # every worker imports torch and verl without the collector's passes over them (2-3 s of
        # CPU each: infra/gc_imports.py)
        runtime.setdefault("worker_process_setup_hook", WORKER_SETUP_HOOK)
        if joins_cluster(cfg):
            # joining a running cluster (soft_spatial.launch): its resources are already set
            for key in ray_session.NODE_KEYS:
                ray_init.pop(key, None)
            return None
    ray_dir = ray_session.run_ray_dir()  # refused unless this user's alone
    ray_session.reap_orphans()
    os.environ[ray_session.RAY_TMPDIR] = str(ray_dir)  # inherited by every Ray process
    # this machine only: every Ray process listens on 127.0.0.1, with a token of the run's own
    # (0600, in the run's Ray directory, gone with it), never Ray's shared ~/.ray/auth_token
    loopback_only()
    token_auth(os.environ, ray_dir / "auth_token", create=True)
    reload_auth_settings()
    local = ray_session.start_local(ray_dir, OmegaConf.to_container(ray_init, resolve=True), wait=False)
    with open_dict(cfg):
        for key in ray_session.NODE_KEYS:  # the head took them; a client joining may not
            ray_init.pop(key, None)
    return local


def join_local(cfg, local: ray_session.LocalRay) -> None:
    """Wait until the run's local Ray (`runtime_env`) is up and point the driver's ``ray.init`` at
    it (a head that exited first raises, with the end of its log)."""
    local.wait_up()
    with open_dict(cfg):
        cfg.ray_kwargs.ray_init.address = local.address


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

    refuse_renamed(sys.argv[1:], "python -m soft_spatial.train")  # the settings group's old name
    # SIGTERM (Slurm's time limit or preemption, timeout, kill) ends the run as Ctrl-C does
    with command("python -m soft_spatial.train",
                 "the run directory keeps its last checkpoint; the same command resumes from it"):
        _main()


if __name__ == "__main__":
    main()
