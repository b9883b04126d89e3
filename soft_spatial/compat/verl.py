"""The one place where soft_spatial touches verl internals (pinned to verl 0.9.1).

Everything else in the project uses verl's public seams (registries, config dataclasses, the
engine's overridable methods). What is *not* a documented seam lives here, each with the 0.9.1
location it relies on, so an upgrade has one file to check and ``tests/test_compat_verl.py``
fails loudly when upstream moves:

* ``EngineRegistry._engines`` (``verl/workers/engine/base.py``, class ``EngineRegistry``): read to
  make registration idempotent (``register`` asserts on a duplicate key) and to add the stock FSDP
  engines for device ``"cpu"`` (0.9.1 registers them for ``cuda``/``npu`` only, L1143/L1594 of
  ``verl/workers/engine/fsdp/transformer_impl.py``).
* ``FSDPEngine._build_module`` (``transformer_impl.py`` L254–337) branches on
  ``model_config.model_type`` and asserts it is ``language_model`` or ``value_model`` (L273–294):
  :func:`as_language_model` presents a project model type as ``language_model`` for that call only.
* ``FSDPEngineWithLMHead.prepare_model_inputs`` / ``prepare_model_outputs`` / ``forward_step``
  (L1145, L1332, L1549): overridden by :class:`soft_spatial.actor.train_engine.SoftFSDPEngine`, which relies
  on the ``output_args`` keys ``pad_size``, ``input_ids_rmpad_rolled``, ``temperature_rmpad``
  (remove-padding path) and ``temperature`` (padded path) listed in :data:`OUTPUT_ARGS_KEYS`.
* ``RayPPOTrainer._compute_ref_log_prob`` (``verl/trainer/ppo/ray_trainer.py`` L1266–1288) keeps
  only the reference worker's ``log_probs``: :func:`ref_log_prob_outputs` performs the same steps
  (same worker calls, padding conversions and metadata) and also keeps further per-token outputs
  (the candidate KL's ``cand_logp``).
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
* ``verl.workers.rollout.base._ROLLOUT_REGISTRY`` (``base.py`` L89–93): the map from
  ``(rollout.name, mode)`` to the weight-sync adapter's dotted path that ``get_rollout_class``
  reads; :func:`register_rollout_adapter` adds an entry (verl has no public registration call).
* ``ActorRolloutRefWorker.init_model`` (``verl/workers/engine_workers.py`` L639–643) builds
  ``self.loss_fn = partial(ppo_loss, config=actor_config)``: :func:`loss_config` reads the actor
  config back from that partial.
* ``RolloutReplica._server_handle`` / ``_server_address`` (``verl/workers/rollout/replica.py``
  L128–129, read by the public ``server_handle`` / ``server_address`` properties, L247–254): a
  replica's ``launch_servers`` sets them, as verl's own replicas do; :func:`set_replica_server`.
* Private ``RayPPOTrainer`` / ``FSDPEngine`` methods overridden by soft_spatial's subclasses
  (:data:`OVERRIDDEN_PRIVATE_METHODS`: name, 0.9.1 signature, 0.9.1 line, who overrides it):
  ``_compute_old_log_prob`` (L1290), ``_compute_ref_log_prob`` (L1266), ``_update_actor``
  (L1327), ``_validate`` (L596), ``_maybe_log_val_generations`` (L548), ``_save_checkpoint``
  (L983) of ``ray_trainer.py``
  (:class:`soft_spatial.integration.ppo_trainer.SoftRayPPOTrainer`), and ``_build_module`` (L254),
  ``_build_fsdp_module`` (L385) of ``transformer_impl.py``
  (:class:`soft_spatial.actor.train_engine.SoftFSDPEngine`); ``check_internals`` checks each exists
  with its signature and that ``RayPPOTrainer.fit`` / ``FSDPEngine._build_model_optimizer``
  still call it.
* For ``rollout.name=sglang_soft`` (``soft_spatial/rollout/sglang_server.py``): the private
  ``_to_ipc_device`` (:func:`to_ipc_device`), ``ServerAdapter._engine``, ``_init_server_adapter``
  and ``_is_server_tp_leader`` (:func:`server_adapter_engine`) of
  ``verl/workers/rollout/sglang_rollout/sglang_rollout.py`` (L61, L144, L208, L265), and the fact
  that ``SGLangHttpServer.launch_server`` reads
  ``sglang.srt.entrypoints.engine.run_scheduler_process`` at launch; checked by
  :func:`check_sglang_internals` (needs sglang; ``tests/sglang_real/test_verl_server.py``).
"""
from __future__ import annotations

import contextlib
import inspect
import warnings
from typing import Any
from collections.abc import Callable, Iterator, Sequence

__all__ = ["VERL_VERSION", "check_verl_version", "register_engine", "as_language_model",
           "check_internals", "cpu_pool_manager", "append_file_logger", "after_step_logged",
           "OUTPUT_ARGS_KEYS",
           "ref_log_prob_outputs", "validation_outputs", "register_rollout_adapter", "loss_config",
           "to_ipc_device", "server_adapter_engine", "set_replica_server", "OVERRIDDEN_PRIVATE_METHODS",
           "check_sglang_internals"]

VERL_VERSION = "0.9.1"
OUTPUT_ARGS_KEYS = {
    "remove_padding": ("pad_size", "input_ids_rmpad_rolled", "temperature_rmpad"),
    "padded": ("input_ids_rmpad_rolled", "temperature"),
}


def check_verl_version(strict: bool = False) -> str:
    """Return verl's version; warn (or raise with ``strict``) unless it is the pinned 0.9.1."""
    import verl

    version = getattr(verl, "__version__", "unknown")
    if version != VERL_VERSION:
        msg = (f"soft_spatial is written against verl {VERL_VERSION}, found verl {version}: the "
               f"internals listed in soft_spatial/compat/verl.py may have moved; run "
               f"tests/test_compat_verl.py")
        if strict:
            raise RuntimeError(msg)
        warnings.warn(msg, RuntimeWarning, stacklevel=2)
    return version


def _registry():
    from verl.workers.engine.base import EngineRegistry

    engines = getattr(EngineRegistry, "_engines", None)
    if not isinstance(engines, dict):
        raise RuntimeError("verl internals changed: EngineRegistry._engines is not a dict "
                           "(see soft_spatial/compat/verl.py)")
    return EngineRegistry, engines


def register_engine(engine_cls, model_type: str, backends: Sequence[str],
                    devices: Sequence[str]) -> None:
    """Register ``engine_cls`` for every (backend, device) not registered yet (idempotent).

    A key already bound to a *different* class is left alone and reported, never overwritten.
    """
    registry, engines = _registry()
    for backend in backends:
        for device in devices:
            current = engines.get(model_type, {}).get(backend, {}).get(device)
            if current is engine_cls:
                continue
            if current is not None:
                warnings.warn(f"verl engine ({model_type}, {backend}, {device}) is already "
                              f"{current.__qualname__}; not replacing it with "
                              f"{engine_cls.__qualname__}", RuntimeWarning, stacklevel=2)
                continue
            registry.register(model_type=model_type, backend=backend, device=device)(engine_cls)


@contextlib.contextmanager
def as_language_model(model_config) -> Iterator[None]:
    """Within the block ``model_config.model_type`` reads ``language_model`` (for
    ``FSDPEngine._build_module``'s assertion); restored afterwards, also on error."""
    original = model_config.model_type
    model_config.model_type = "language_model"
    try:
        yield
    finally:
        model_config.model_type = original


@contextlib.contextmanager
def no_cpu_offload_on_cpu(engine_config) -> Iterator[None]:
    """On the CPU platform, build FSDP without a CPU offload policy.

    ``FSDPEngine._build_fsdp_module`` gives forward-only (ref) engines
    ``CPUOffloadPolicy(pin_memory=True)``; pinning needs CUDA, and offloading from the CPU to the
    CPU is meaningless. Within the block ``forward_only`` and ``offload_policy`` read False
    (restored afterwards); on any other device this is a no-op.
    """
    from verl.utils.device import get_device_name

    if get_device_name() != "cpu":
        yield
        return
    # verl's BaseConfig freezes these fields; the override is scoped to this block
    saved = {k: getattr(engine_config, k) for k in ("forward_only", "offload_policy")}
    for k in saved:
        object.__setattr__(engine_config, k, False)
    try:
        yield
    finally:
        for k, v in saved.items():
            object.__setattr__(engine_config, k, v)


def cpu_pool_manager(manager):
    """verl's ResourcePoolManager with its private GPU-count check (``_check_resource_available``)
    replaced, on the CPU platform, by a count of Ray's available CPUs."""
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


def loss_config(loss_fn):
    """The actor config verl bound into the worker's loss: ``ActorRolloutRefWorker.init_model``
    (verl 0.9.1, ``engine_workers.py`` L643) sets ``self.loss_fn = partial(ppo_loss,
    config=actor_config)``; this reads ``loss_fn.keywords["config"]``."""
    keywords = getattr(loss_fn, "keywords", None)
    if not isinstance(keywords, dict) or "config" not in keywords:
        raise RuntimeError(f"verl internals changed: the worker's loss_fn {loss_fn!r} is not a "
                           f"partial with a config keyword (soft_spatial/compat/verl.py)")
    return keywords["config"]


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


# (module, class, method) -> (0.9.1 parameters, the upstream caller whose source must call it)
OVERRIDDEN_PRIVATE_METHODS = {
    ("verl.trainer.ppo.ray_trainer", "RayPPOTrainer", "_compute_old_log_prob"):
        (["self", "batch"], "fit", "self._compute_old_log_prob(batch)"),
    ("verl.trainer.ppo.ray_trainer", "RayPPOTrainer", "_compute_ref_log_prob"):
        (["self", "batch"], "fit", "self._compute_ref_log_prob(batch)"),
    ("verl.trainer.ppo.ray_trainer", "RayPPOTrainer", "_update_actor"):
        (["self", "batch"], "fit", "self._update_actor(batch)"),
    ("verl.trainer.ppo.ray_trainer", "RayPPOTrainer", "_validate"):
        (["self", "merged"], "fit", "self._validate("),
    ("verl.trainer.ppo.ray_trainer", "RayPPOTrainer", "_maybe_log_val_generations"):
        (["self", "inputs", "outputs", "scores"], "_validate", "self._maybe_log_val_generations("),
    ("verl.trainer.ppo.ray_trainer", "RayPPOTrainer", "_save_checkpoint"):
        (["self"], "fit", "self._save_checkpoint()"),
    ("verl.workers.engine.fsdp.transformer_impl", "FSDPEngine", "_build_module"):
        (["self"], "_build_model_optimizer", "self._build_module()"),
    ("verl.workers.engine.fsdp.transformer_impl", "FSDPEngine", "_build_fsdp_module"):
        (["self", "module"], "_build_model_optimizer", "self._build_fsdp_module(module)"),
}


def _signature_problems(cls, cls_name: str, name: str, params: list, why: str = "") -> list:
    fn = getattr(cls, name, None)
    if fn is None:
        return [f"{cls_name}.{name} is gone{why}"]
    got = list(inspect.signature(fn).parameters)
    return [] if got == params else [f"{cls_name}.{name} signature changed: {got} != {params}"]


def _check_overrides() -> list:
    import importlib

    problems = []
    for (module, cls_name, name), (params, caller, call) in OVERRIDDEN_PRIVATE_METHODS.items():
        cls = getattr(importlib.import_module(module), cls_name)
        moved = _signature_problems(cls, cls_name, name, params, " (overridden by soft_spatial)")
        problems += moved
        if moved:
            continue
        caller_fn = getattr(cls, caller, None)
        if caller_fn is None or call not in inspect.getsource(caller_fn):
            problems.append(f"{cls_name}.{caller} no longer calls {call!r} (soft_spatial "
                            f"overrides {name})")
    return problems


def check_sglang_internals() -> list:
    """The verl-side SGLang internals (needs sglang): ``_to_ipc_device`` and the ``ServerAdapter``
    members :func:`server_adapter_engine` uses. Empty list = OK."""
    import inspect as _inspect

    from verl.workers.rollout.sglang_rollout import sglang_rollout as sr

    problems = []
    if not callable(getattr(sr, "_to_ipc_device", None)):
        problems.append("verl's sglang_rollout._to_ipc_device is gone (to_ipc_device)")
    for name in ("_init_server_adapter", "_is_server_tp_leader"):
        if not callable(getattr(sr.ServerAdapter, name, None)):
            problems.append(f"verl's ServerAdapter.{name} is gone (server_adapter_engine)")
    if "self._engine" not in _inspect.getsource(sr.ServerAdapter.__init__):
        problems.append("verl's ServerAdapter no longer sets self._engine (server_adapter_engine)")
    from verl.workers.rollout.sglang_rollout.async_sglang_server import SGLangHttpServer
    if ("run_scheduler_process_func=sglang.srt.entrypoints.engine.run_scheduler_process"
            not in _inspect.getsource(SGLangHttpServer.launch_server)):
        problems.append("SGLangHttpServer.launch_server no longer reads sglang.srt.entrypoints."
                        "engine.run_scheduler_process at launch (hooks.plugin_schedulers)")
    params = list(_inspect.signature(SGLangHttpServer.generate).parameters)[:5]
    if params != ["self", "prompt_ids", "sampling_params", "request_id", "image_data"]:
        problems.append(f"SGLangHttpServer.generate's parameters changed: {params} "
                        f"(SGLangSoftHttpServer.generate)")
    return problems


def check_internals() -> list:
    """Check every internal listed in the module docstring; return a list of problems (empty = OK).

    Used by the compat test and at plugin registration (as a warning).
    """
    problems = _check_overrides()
    from verl.workers.rollout import base as rollout_base
    if not isinstance(getattr(rollout_base, "_ROLLOUT_REGISTRY", None), dict):
        problems.append("verl.workers.rollout.base._ROLLOUT_REGISTRY is gone "
                        "(register_rollout_adapter)")
    elif "_ROLLOUT_REGISTRY[(rollout_name, mode)]" not in inspect.getsource(
            rollout_base.get_rollout_class):
        problems.append("get_rollout_class no longer reads _ROLLOUT_REGISTRY "
                        "(register_rollout_adapter)")
    from verl.workers.rollout.replica import RolloutReplica
    for prop, attr in (("server_handle", "_server_handle"), ("server_address", "_server_address")):
        getter = getattr(vars(RolloutReplica).get(prop), "fget", None)
        if getter is None or f"self.{attr}" not in inspect.getsource(getter):
            problems.append(f"RolloutReplica.{prop} no longer returns self.{attr} "
                            f"(set_replica_server)")
    from verl.workers.engine_workers import ActorRolloutRefWorker
    if "partial(ppo_loss, config=actor_config)" not in inspect.getsource(
            ActorRolloutRefWorker.init_model):
        problems.append("ActorRolloutRefWorker.init_model no longer builds "
                        "partial(ppo_loss, config=actor_config) (loss_config)")
    try:
        _registry()
    except Exception as e:  # pragma: no cover - only on an upstream change
        problems.append(str(e))
    from verl.single_controller.ray.base import ResourcePoolManager
    if not callable(getattr(ResourcePoolManager, "_check_resource_available", None)):
        problems.append("ResourcePoolManager._check_resource_available is gone (cpu_pool_manager)")
    from verl.utils import tracking
    upstream = next(c for c in tracking.FileLogger.__mro__ if "_soft_spatial_appends" not in vars(c))
    if 'open(self.filepath, "wb"' not in inspect.getsource(upstream.__init__):
        problems.append("verl.utils.tracking.FileLogger no longer opens its file with 'wb' "
                        "(append_file_logger may be unnecessary or wrong)")
    if "FileLogger(project_name, experiment_name)" not in inspect.getsource(tracking.Tracking.__init__):
        problems.append("Tracking.__init__ no longer builds FileLogger(project_name, "
                        "experiment_name) (append_file_logger)")
    from verl.workers.engine.fsdp import transformer_impl as ti

    cls = getattr(ti, "FSDPEngineWithLMHead", None)
    if cls is None:
        return problems + ["verl.workers.engine.fsdp.transformer_impl.FSDPEngineWithLMHead is gone"]
    for name, params in (("prepare_model_inputs", ["self", "micro_batch"]),
                         ("prepare_model_outputs",
                          ["self", "output", "output_args", "micro_batch", "logits_processor_func"]),
                         ("forward_step", ["self", "micro_batch", "loss_function", "forward_only"]),
                         ("optimizer_step", ["self"]), ("optimizer_zero_grad", ["self"])):
        problems += _signature_problems(cls, "FSDPEngineWithLMHead", name, params)
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer

    ref = getattr(RayPPOTrainer, "_compute_ref_log_prob", None)
    if ref is None:
        problems.append("RayPPOTrainer._compute_ref_log_prob is gone (ref_log_prob_outputs)")
    else:
        src = inspect.getsource(ref)
        for needle in ("left_right_2_no_padding", "ref_in_actor", "compute_ref_log_prob(",
                       "compute_log_prob(", 'tu.get(output, "log_probs")', "no_padding_2_padding",
                       '"calculate_entropy": False', '"compute_loss": False', "no_lora_adapter"):
            if needle not in src:
                problems.append(f"RayPPOTrainer._compute_ref_log_prob no longer contains "
                                f"{needle!r} (ref_log_prob_outputs mirrors it)")
    src = inspect.getsource(RayPPOTrainer.fit)
    save, log = src.find("self._save_checkpoint()"), src.find("logger.log(data=metrics, step=self.global_steps)")
    if "from verl.utils.tracking import Tracking" not in src or "logger = Tracking(" not in src \
            or not 0 <= save < log:
        problems.append("RayPPOTrainer.fit no longer builds verl.utils.tracking.Tracking when it runs "
                        "and saves each step before logging it (after_step_logged)")
    if list(inspect.signature(tracking.Tracking.log).parameters) != ["self", "data", "step", "backend"]:
        problems.append("Tracking.log's parameters changed (after_step_logged)")
    src = inspect.getsource(RayPPOTrainer._validate)
    for needle in ("self.async_rollout_manager.generate_sequences(",
                   "self.tokenizer.decode(ids, skip_special_tokens=True) for ids in output_ids",
                   "self._maybe_log_val_generations(inputs=sample_inputs, outputs=sample_outputs"):
        if needle not in src:
            problems.append(f"RayPPOTrainer._validate no longer contains {needle!r} "
                            f"(validation_outputs, SoftRayPPOTrainer._maybe_log_val_generations)")
    src = inspect.getsource(ti.FSDPEngine._build_module)
    if '"language_model"' not in src:
        problems.append("FSDPEngine._build_module no longer branches on 'language_model'")
    src = inspect.getsource(cls.prepare_model_inputs)
    for keys in OUTPUT_ARGS_KEYS.values():
        for key in keys:
            if f'output_args["{key}"]' not in src:
                problems.append(f"prepare_model_inputs no longer sets output_args[{key!r}]")
    return problems
