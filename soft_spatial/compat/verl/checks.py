"""The guards: verl's version, and every verl internal soft_spatial touches (:mod:`.engine`,
:mod:`.trainer`, :mod:`.rollout`) or overrides, checked against the installed verl so that
``tests/compat/test_verl.py`` fails loudly, naming what moved, when upstream changes.

Private ``RayPPOTrainer`` / ``FSDPEngine`` methods overridden by soft_spatial's subclasses
(:data:`OVERRIDDEN_PRIVATE_METHODS`: name, 0.9.1 signature, 0.9.1 line, who overrides it):
``_compute_old_log_prob`` (L1290), ``_compute_ref_log_prob`` (L1266), ``_update_actor`` (L1327),
``_validate`` (L596), ``_maybe_log_val_generations`` (L548), ``_save_checkpoint`` (L983),
``_load_checkpoint`` (L1052) of
``ray_trainer.py`` (:class:`soft_spatial.integration.ppo_trainer.SoftRayPPOTrainer`), and
``_build_module`` (L254), ``_build_fsdp_module`` (L385) of ``transformer_impl.py``
(:class:`soft_spatial.actor.train_engine.SoftFSDPEngine`); :func:`check_internals` checks each
exists with its signature and that ``RayPPOTrainer.fit`` / ``FSDPEngine._build_model_optimizer``
still call it.
"""
from __future__ import annotations

import importlib
import inspect
import warnings

from soft_spatial.compat.verl.engine import OUTPUT_ARGS_KEYS, engine_registry
from soft_spatial.compat.verl.trainer import EPOCH_BOUNDARY_SKIP

VERL_VERSION = "0.9.1"


def check_verl_version(strict: bool = False) -> str:
    """Return verl's version; warn (or raise with ``strict``) unless it is the pinned 0.9.1."""
    import verl

    version = getattr(verl, "__version__", "unknown")
    if version != VERL_VERSION:
        msg = (f"soft_spatial is written against verl {VERL_VERSION}, found verl {version}: the "
               f"internals listed in soft_spatial/compat/verl/ may have moved; run "
               f"tests/compat/test_verl.py")
        if strict:
            raise RuntimeError(msg)
        warnings.warn(msg, RuntimeWarning, stacklevel=2)
    return version


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
    ("verl.trainer.ppo.ray_trainer", "RayPPOTrainer", "_load_checkpoint"):
        (["self"], "fit", "self._load_checkpoint()"),
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


def _lacks(fn, needle: str) -> bool:
    """Whether ``fn`` is gone or its source no longer contains ``needle``."""
    return fn is None or needle not in inspect.getsource(fn)


def _check_overrides() -> list:
    problems = []
    for (module, cls_name, name), (params, caller, call) in OVERRIDDEN_PRIVATE_METHODS.items():
        cls = getattr(importlib.import_module(module), cls_name)
        moved = _signature_problems(cls, cls_name, name, params, " (overridden by soft_spatial)")
        problems += moved
        if moved:
            continue
        if _lacks(getattr(cls, caller, None), call):
            problems.append(f"{cls_name}.{caller} no longer calls {call!r} (soft_spatial "
                            f"overrides {name})")
    return problems


def _rollout_problems() -> list:
    """:mod:`.rollout`'s touches without sglang: the adapter registry and the replica's fields."""
    problems = []
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
    return problems


def _engine_problems() -> list:
    """:mod:`.engine`'s touches: the worker's loss partial, the engine registry, the FSDP engine."""
    problems = []
    from verl.workers.engine_workers import ActorRolloutRefWorker
    if "partial(ppo_loss, config=actor_config)" not in inspect.getsource(
            ActorRolloutRefWorker.init_model):
        problems.append("ActorRolloutRefWorker.init_model no longer builds "
                        "partial(ppo_loss, config=actor_config) (loss_config)")
    try:
        engine_registry()
    except Exception as e:  # pragma: no cover - only on an upstream change
        problems.append(str(e))
    from verl.workers.engine.fsdp import transformer_impl as ti

    src = inspect.getsource(ti.FSDPEngine._build_module)
    if '"language_model"' not in src:
        problems.append("FSDPEngine._build_module no longer branches on 'language_model'")
    cls = getattr(ti, "FSDPEngineWithLMHead", None)
    if cls is None:
        return problems + ["verl.workers.engine.fsdp.transformer_impl.FSDPEngineWithLMHead is gone"]
    for name, params in (("prepare_model_inputs", ["self", "micro_batch"]),
                         ("prepare_model_outputs",
                          ["self", "output", "output_args", "micro_batch", "logits_processor_func"]),
                         ("forward_step", ["self", "micro_batch", "loss_function", "forward_only"]),
                         ("optimizer_step", ["self"]), ("optimizer_zero_grad", ["self"])):
        problems += _signature_problems(cls, "FSDPEngineWithLMHead", name, params)
    src = inspect.getsource(cls.prepare_model_inputs)
    for keys in OUTPUT_ARGS_KEYS.values():
        for key in keys:
            if f'output_args["{key}"]' not in src:
                problems.append(f"prepare_model_inputs no longer sets output_args[{key!r}]")
    return problems


def _trainer_problems() -> list:
    """:mod:`.trainer`'s touches: the resource pool check, the file logger, ``Tracking`` in
    ``fit``, the reference log-probs, the generation and the validation batches."""
    problems = []
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
    src = inspect.getsource(RayPPOTrainer._load_checkpoint)
    for needle in ("at_epoch_boundary = steps_per_epoch > 0 and self.global_steps % steps_per_epoch == 0",
                   EPOCH_BOUNDARY_SKIP, 'os.path.join(global_step_folder, "data.pt")',
                   "self.train_dataloader.load_state_dict(dataloader_state_dict)"):
        if needle not in src:
            problems.append(f"RayPPOTrainer._load_checkpoint no longer contains {needle!r} "
                            f"(restore_epoch_boundary_order)")
    problems += _generation_problems(RayPPOTrainer)
    src = inspect.getsource(RayPPOTrainer._validate)
    for needle in ("self.async_rollout_manager.generate_sequences(",
                   "self.tokenizer.decode(ids, skip_special_tokens=True) for ids in output_ids",
                   "self._maybe_log_val_generations(inputs=sample_inputs, outputs=sample_outputs"):
        if needle not in src:
            problems.append(f"RayPPOTrainer._validate no longer contains {needle!r} "
                            f"(validation_outputs, SoftRayPPOTrainer._maybe_log_val_generations)")
    return problems


def _generation_problems(trainer_cls) -> list:
    """:func:`~soft_spatial.compat.verl.trainer.before_each_generation`'s touches: the rollout
    manager ``init_workers`` builds, its ``generate_sequences(prompts)``, the calls of ``fit`` and
    ``_validate`` through the instance, and what ``tag_noise_keys`` reads (``global_steps``, the
    batch's ``validate`` flag, the replica count)."""
    problems = []
    from verl.experimental.agent_loop.agent_loop import AgentLoopManager
    from verl.workers.rollout.llm_server import LLMServerManager

    problems += _signature_problems(AgentLoopManager, "AgentLoopManager", "generate_sequences",
                                    ["self", "prompts"], " (before_each_generation)")
    problems += _signature_problems(LLMServerManager, "LLMServerManager", "get_replicas",
                                    ["self"], " (tag_noise_keys)")
    if "self.async_rollout_manager = AgentLoopManager.create(" not in inspect.getsource(
            trainer_cls.init_workers):
        problems.append("RayPPOTrainer.init_workers no longer sets self.async_rollout_manager = "
                        "AgentLoopManager.create(...) (before_each_generation)")
    for caller, needle in (("fit", "self.async_rollout_manager.generate_sequences(combined_gen_batch)"),
                           ("_validate", "self.async_rollout_manager.generate_sequences("),
                           ("_validate", '"validate": True'),
                           ("fit", "self.global_steps += 1")):
        if _lacks(getattr(trainer_cls, caller, None), needle):
            problems.append(f"RayPPOTrainer.{caller} no longer contains {needle!r} "
                            f"(before_each_generation, tag_noise_keys)")
    return problems


def check_internals() -> list:
    """Every internal listed in :mod:`.engine`, :mod:`.trainer`, :mod:`.rollout` (without sglang)
    and :data:`OVERRIDDEN_PRIVATE_METHODS`: a list of problems (empty = OK). Used by the compat test."""
    return _check_overrides() + _rollout_problems() + _engine_problems() + _trainer_problems()


def check_sglang_internals() -> list:
    """The verl-side SGLang internals :mod:`.rollout` touches (needs sglang): ``_to_ipc_device`` and
    the ``ServerAdapter`` members ``server_adapter_engine`` uses. Empty list = OK."""
    from verl.workers.rollout.sglang_rollout import sglang_rollout as sr

    problems = []
    if not callable(getattr(sr, "_to_ipc_device", None)):
        problems.append("verl's sglang_rollout._to_ipc_device is gone (to_ipc_device)")
    for name in ("_init_server_adapter", "_is_server_tp_leader"):
        if not callable(getattr(sr.ServerAdapter, name, None)):
            problems.append(f"verl's ServerAdapter.{name} is gone (server_adapter_engine)")
    if "self._engine" not in inspect.getsource(sr.ServerAdapter.__init__):
        problems.append("verl's ServerAdapter no longer sets self._engine (server_adapter_engine)")
    from verl.workers.rollout.sglang_rollout.async_sglang_server import SGLangHttpServer
    if ("run_scheduler_process_func=sglang.srt.entrypoints.engine.run_scheduler_process"
            not in inspect.getsource(SGLangHttpServer.launch_server)):
        problems.append("SGLangHttpServer.launch_server no longer reads sglang.srt.entrypoints."
                        "engine.run_scheduler_process at launch (hooks.plugin_schedulers)")
    params = list(inspect.signature(SGLangHttpServer.generate).parameters)[:5]
    if params != ["self", "prompt_ids", "sampling_params", "request_id", "image_data"]:
        problems.append(f"SGLangHttpServer.generate's parameters changed: {params} "
                        f"(SGLangSoftHttpServer.generate)")
    return problems
