"""verl's PPO trainer, its resource pools and its metrics logger (verl 0.9.1,
``verl/trainer/ppo/ray_trainer.py``, ``verl/single_controller/ray/base.py``, ``verl/utils/tracking.py``):
what soft_spatial touches beyond the documented seams.

* ``RayPPOTrainer._compute_ref_log_prob`` (``ray_trainer.py`` L1266–1288) keeps only the reference
  worker's ``log_probs``: :func:`ref_log_prob_outputs` performs the same steps (same worker calls,
  padding conversions and metadata) and also keeps further per-token outputs (the candidate KL's
  ``cand_logp``).
* ``ResourcePoolManager._check_resource_available`` (``verl/single_controller/ray/base.py``)
  counts GPUs: :func:`cpu_pool_manager` overrides it to count Ray's CPUs on the CPU platform.
* ``verl.utils.tracking.FileLogger`` (``tracking.py`` L529–548) opens its file with ``"wb"``, so
  a resumed run erases the metrics of the steps before the resume: :func:`append_file_logger`
  replaces the class ``Tracking`` instantiates (a module global it looks up at call time) by one
  that appends.
* ``RayPPOTrainer.fit`` (``ray_trainer.py`` L1405–1822) builds its logger as ``Tracking(...)``,
  imported from ``verl.utils.tracking`` when ``fit`` runs, and logs each step with one
  ``logger.log(data=metrics, step=self.global_steps)`` *after* the step's ``_save_checkpoint()``:
  :func:`after_step_logged` calls back after every ``Tracking.log`` within a block, so
  :class:`soft_spatial.integration.ppo_trainer.SoftRayPPOTrainer` writes a step's checkpoint once its
  metrics are logged.
* ``RayPPOTrainer._validate`` (``ray_trainer.py`` L596–693) generates each validation batch through
  ``self.async_rollout_manager.generate_sequences`` and hands ``_maybe_log_val_generations`` only
  the decoded texts: :func:`validation_outputs` sees the generated batches (their soft traces) for
  the duration of one ``_validate`` call, so the logged generations can carry their τ per step.
* ``RayPPOTrainer.fit`` (``ray_trainer.py`` L1513) and ``_validate`` (L640) send every generation
  batch through ``self.async_rollout_manager.generate_sequences(batch)``
  (``AgentLoopManager.generate_sequences(self, prompts)``, ``agent_loop.py`` L1232), whose agent
  loop workers hand each row's non-tensor columns to the agent loop: :func:`before_each_generation`
  lets the trainer add columns to every batch first (the rows' noise keys).
* ``RayPPOTrainer._load_checkpoint`` (``ray_trainer.py`` L1100–1117) skips the dataloader's
  saved state when the checkpoint's step ends an epoch (the state marks the loader exhausted),
  so the sampler's generator restarts from its seed and the resumed run's next epoch repeats the
  first epoch's order, not the uninterrupted run's: :func:`restore_epoch_boundary_order` loads
  that state after it and drains its exhausted iteration, which leaves the generator where the
  uninterrupted run's is.

:mod:`.checks` fails loudly when any of these moves.
"""
from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from typing import Any


def cpu_pool_manager(manager):
    """verl's ResourcePoolManager with its private GPU-count check (``_check_resource_available``,
    verl 0.9.1) replaced, on the CPU platform, by a count of Ray's available CPUs."""
    import ray
    from verl.single_controller.ray.base import ResourcePoolManager

    class CPUResourcePoolManager(ResourcePoolManager):
        def _check_resource_available(self):
            need = sum(n for nodes in self.resource_pool_spec.values() for n in nodes)
            have = int(ray.available_resources().get("CPU", 0))
            if have < need:
                raise ValueError(f"the CPU run needs {need} worker CPUs, Ray has {have}: raise "
                                 f"ray_kwargs.ray_init.num_cpus or lower trainer.n_gpus_per_node")

    return CPUResourcePoolManager(resource_pool_spec=manager.resource_pool_spec,
                                  mapping=manager.mapping)


def append_file_logger() -> None:
    """Make verl's ``file`` logger append to its JSONL instead of truncating it (verl 0.9.1:
    ``verl.utils.tracking.FileLogger.__init__`` opens ``VERL_FILE_LOGGER_PATH`` with ``"wb"``).

    Replaces ``verl.utils.tracking.FileLogger``, which ``Tracking.__init__`` instantiates by its
    module-global name, with a subclass that resolves the path the same way and opens it with
    ``"ab"``. Idempotent; call it in the process that runs ``RayPPOTrainer.fit`` (the TaskRunner).
    Stale steps after the resumed checkpoint are removed beforehand by the entry point
    (``soft_spatial.infra.run_dir.keep_metrics_until``).
    """
    import os

    from verl.utils import tracking

    if getattr(tracking.FileLogger, "_soft_spatial_appends", False):
        return

    class AppendingFileLogger(tracking.FileLogger):
        _soft_spatial_appends = True

        def __init__(self, project_name: str, experiment_name: str):  # not super().__init__: it truncates
            self.project_name, self.experiment_name = project_name, experiment_name
            self.filepath = os.getenv("VERL_FILE_LOGGER_PATH", None)
            if self.filepath is None:
                root = os.path.expanduser(os.getenv("VERL_FILE_LOGGER_ROOT", "."))
                os.makedirs(os.path.join(root, project_name), exist_ok=True)
                self.filepath = os.path.join(root, project_name, f"{experiment_name}.jsonl")
            print(f"Appending to file logger at {os.path.abspath(self.filepath)}")
            self.fp = open(self.filepath, "ab", buffering=0)

    tracking.FileLogger = AppendingFileLogger


@contextlib.contextmanager
def after_step_logged(callback: Callable[[int], None]) -> Iterator[None]:
    """Within the block, ``callback(step)`` runs after every ``Tracking.log(data, step)`` has
    written to all backends (verl 0.9.1: ``RayPPOTrainer.fit`` instantiates
    ``verl.utils.tracking.Tracking``, looked up when ``fit`` runs, and logs each training step
    once). Replaces ``verl.utils.tracking.Tracking`` by a subclass for the block only."""
    from verl.utils import tracking

    original = tracking.Tracking

    class CallbackTracking(original):
        def log(self, data, step, backend=None):
            super().log(data=data, step=step, backend=backend)
            callback(step)

    tracking.Tracking = CallbackTracking
    try:
        yield
    finally:
        tracking.Tracking = original


def ref_log_prob_outputs(trainer, batch, extra: dict):
    """``RayPPOTrainer._compute_ref_log_prob`` (verl 0.9.1) keeping more reference outputs.

    Touches the trainer's ``ref_in_actor``, ``actor_rollout_wg`` and ``ref_policy_wg`` and the
    worker methods ``compute_log_prob`` / ``compute_ref_log_prob`` exactly as 0.9.1's method
    does. ``extra`` maps a per-token worker output (``[nnz, ...]``) to the batch key it is stored
    under (``[B, R, ...]``, response-aligned like ``ref_log_prob``). Returns a ``DataProto``
    with ``ref_log_prob`` and the extra keys.
    """
    from verl import DataProto
    from verl.utils import tensordict_utils as tu
    from verl.workers.utils.padding import left_right_2_no_padding, no_padding_2_padding

    batch_td = left_right_2_no_padding(batch.to_tensordict())
    metadata = {"calculate_entropy": False, "compute_loss": False}
    if trainer.ref_in_actor:
        metadata["no_lora_adapter"] = True
    tu.assign_non_tensor(batch_td, **metadata)
    if trainer.ref_in_actor:
        output = trainer.actor_rollout_wg.compute_log_prob(batch_td)
    else:
        output = trainer.ref_policy_wg.compute_ref_log_prob(batch_td)
    keys = {"log_probs": "ref_log_prob", **extra}
    missing = [k for k in keys if k not in output.keys()]
    if missing:
        raise KeyError(f"the reference worker returned {sorted(output.keys())}, not {missing}")
    out = {dst: no_padding_2_padding(tu.get(output, src), batch_td).float()
           for src, dst in keys.items()}
    return DataProto.from_tensordict(tu.get_tensordict(out))


def before_each_generation(trainer, prepare: Callable[[Any], None]) -> None:
    """Make ``trainer.async_rollout_manager.generate_sequences`` call ``prepare(batch)`` on every
    generation batch (a ``DataProto``, which ``prepare`` may change in place) before generating
    it, for the trainer's lifetime.

    Touches (verl 0.9.1): the ``AgentLoopManager`` instance ``RayPPOTrainer.init_workers`` stores
    as ``self.async_rollout_manager`` (``ray_trainer.py`` L960), whose bound
    ``generate_sequences(prompts)`` (``agent_loop.py`` L1232) is replaced, on this instance only,
    by a wrapper; ``fit`` and ``_validate`` look the method up on the instance at every call
    (L1513, L640). Call it once, after ``init_workers``."""
    manager = trainer.async_rollout_manager
    generate = manager.generate_sequences

    def prepared(prompts, *args, **kwargs):
        prepare(prompts)
        return generate(prompts, *args, **kwargs)

    manager.generate_sequences = prepared


@contextlib.contextmanager
def validation_outputs(trainer, on_output: Callable[[Any], None]):
    """Within the block, ``on_output(batch)`` sees every batch the trainer's rollout manager
    generates (``RayPPOTrainer._validate`` calls ``async_rollout_manager.generate_sequences`` once
    per validation batch, padded to a multiple of the agent-loop workers; verl 0.9.1)."""
    manager = trainer.async_rollout_manager
    own = vars(manager).get("generate_sequences")
    generate = manager.generate_sequences

    def capturing(batch):
        out = generate(batch)
        on_output(out)
        return out

    manager.generate_sequences = capturing
    try:
        yield
    finally:
        if own is None:
            del manager.generate_sequences
        else:
            manager.generate_sequences = own


#: what verl 0.9.1's ``_load_checkpoint`` prints when it skips the state (checked by :mod:`.checks`)
EPOCH_BOUNDARY_SKIP = "Skipping dataloader state restore"


def restore_epoch_boundary_order(trainer, global_step_folder: str | os.PathLike) -> bool:
    """After verl 0.9.1's ``RayPPOTrainer._load_checkpoint``: when ``trainer.global_steps`` ends
    an epoch, load the dataloader state it skipped (``<global_step_folder>/data.pt``, tensors and
    numbers only: ``weights_only``) and drain its exhausted iteration. torchdata's stateful
    sampler saves its generator as it was when the epoch began and skips the indices it yielded,
    so the drained iteration loads no sample and leaves the generator after that epoch's
    permutation: the next epoch is drawn as the uninterrupted run draws it. Returns whether it
    acted (False mid-epoch, where verl restores the state itself, or without ``data.pt``).

    Raises ``ValueError`` naming the file if its state is not an exhausted epoch (draining would
    load a whole epoch of samples)."""
    import torch

    loader, step = trainer.train_dataloader, int(trainer.global_steps)
    per_epoch = len(loader)
    path = os.path.join(os.fspath(global_step_folder), "data.pt")
    if step <= 0 or per_epoch <= 0 or step % per_epoch or not os.path.exists(path):
        return False
    state = torch.load(path, map_location="cpu", weights_only=True)
    if state.get("_num_yielded") != per_epoch:
        raise ValueError(f"{path}: the dataloader state at step {step} yielded "
                         f"{state.get('_num_yielded')!r} batches of an epoch of {per_epoch}: not an "
                         f"epoch's end (does this checkpoint belong to this data and batch size?)")
    loader.load_state_dict(state)
    left = sum(1 for _ in loader)
    if left:
        raise ValueError(f"{path}: the restored dataloader still yielded {left} batches of its epoch")
    return True
