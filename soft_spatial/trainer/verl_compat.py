"""The one place where soft_spatial touches verl internals (pinned to verl 0.9.1).

Everything else in the project uses verl's public seams (registries, config dataclasses, the
engine's overridable methods). What is *not* a documented seam lives here, each with the 0.9.1
location it relies on, so an upgrade has one file to check and ``tests/test_actor_verl_compat.py``
fails loudly when upstream moves:

* ``EngineRegistry._engines`` (``verl/workers/engine/base.py``, class ``EngineRegistry``): read to
  make registration idempotent (``register`` asserts on a duplicate key) and to add the stock FSDP
  engines for device ``"cpu"`` (0.9.1 registers them for ``cuda``/``npu`` only, L1143/L1594 of
  ``verl/workers/engine/fsdp/transformer_impl.py``).
* ``FSDPEngine._build_module`` (``transformer_impl.py`` L254–337) branches on
  ``model_config.model_type`` and asserts it is ``language_model`` or ``value_model`` (L273–294):
  :func:`as_language_model` presents a project model type as ``language_model`` for that call only.
* ``FSDPEngineWithLMHead.prepare_model_inputs`` / ``prepare_model_outputs`` / ``forward_step``
  (L1145, L1332, L1549): overridden by :class:`soft_spatial.actor.engine.SoftFSDPEngine`, which relies
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
* ``RayPPOTrainer._validate`` (``ray_trainer.py`` L596–693) generates each validation batch through
  ``self.async_rollout_manager.generate_sequences`` and hands ``_maybe_log_val_generations`` only
  the decoded texts: :func:`validation_outputs` sees the generated batches (their soft traces) for
  the duration of one ``_validate`` call, so the logged generations can carry their τ per step.
* For ``rollout.name=sglang_soft`` (``soft_spatial/rollout/sglang_server.py``): the private
  ``_to_ipc_device``, ``ServerAdapter._engine``, ``_init_server_adapter`` and
  ``_is_server_tp_leader`` of ``verl/workers/rollout/sglang_rollout/sglang_rollout.py``, and the
  fact that ``SGLangHttpServer.launch_server`` reads
  ``sglang.srt.entrypoints.engine.run_scheduler_process`` at launch; checked by
  ``tests/sglang_real/test_verl_server.py`` where sglang imports.
"""
from __future__ import annotations

import contextlib
import inspect
import warnings
from typing import Any, Callable, Iterator, Sequence

__all__ = ["VERL_VERSION", "check_verl_version", "register_engine", "as_language_model",
           "check_internals", "cpu_pool_manager", "append_file_logger", "OUTPUT_ARGS_KEYS",
           "ref_log_prob_outputs"]

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
               f"internals listed in soft_spatial/trainer/verl_compat.py may have moved; run "
               f"tests/test_actor_verl_compat.py")
        if strict:
            raise RuntimeError(msg)
        warnings.warn(msg, RuntimeWarning, stacklevel=2)
    return version


def _registry():
    from verl.workers.engine.base import EngineRegistry

    engines = getattr(EngineRegistry, "_engines", None)
    if not isinstance(engines, dict):
        raise RuntimeError("verl internals changed: EngineRegistry._engines is not a dict "
                           "(see soft_spatial/trainer/verl_compat.py)")
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
    (``soft_spatial.trainer.run_dir.keep_metrics_until``).
    """
    import os

    from verl.utils import tracking

    if getattr(tracking.FileLogger, "_soft_spatial_appends", False):
        return

    class AppendingFileLogger(tracking.FileLogger):
        _soft_spatial_appends = True

        def __init__(self, project_name: str, experiment_name: str):  # noqa: super() truncates
            self.project_name, self.experiment_name = project_name, experiment_name
            self.filepath = os.getenv("VERL_FILE_LOGGER_PATH", None)
            if self.filepath is None:
                root = os.path.expanduser(os.getenv("VERL_FILE_LOGGER_ROOT", "."))
                os.makedirs(os.path.join(root, project_name), exist_ok=True)
                self.filepath = os.path.join(root, project_name, f"{experiment_name}.jsonl")
            print(f"Appending to file logger at {os.path.abspath(self.filepath)}")
            self.fp = open(self.filepath, "ab", buffering=0)

    tracking.FileLogger = AppendingFileLogger


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


def check_internals() -> list:
    """Check every internal listed in the module docstring; return a list of problems (empty = OK).

    Used by the compat test and at plugin registration (as a warning).
    """
    problems = []
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
        fn = getattr(cls, name, None)
        if fn is None:
            problems.append(f"FSDPEngineWithLMHead.{name} is gone")
            continue
        got = list(inspect.signature(fn).parameters)
        if got != params:
            problems.append(f"FSDPEngineWithLMHead.{name} signature changed: {got} != {params}")
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
