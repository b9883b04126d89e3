"""verl's training engine and its worker (verl 0.9.1, ``verl/workers/engine/``,
``verl/workers/engine_workers.py``): what soft_spatial touches beyond the documented seams.

* ``EngineRegistry._engines`` (``verl/workers/engine/base.py``, class ``EngineRegistry``): read to
  make registration idempotent (``register`` asserts on a duplicate key) and to add the stock FSDP
  engines for device ``"cpu"`` (0.9.1 registers them for ``cuda``/``npu`` only, L1143/L1594 of
  ``verl/workers/engine/fsdp/transformer_impl.py``): :func:`engine_registry`, :func:`register_engine`.
* ``FSDPEngine._build_module`` (``transformer_impl.py`` L254–337) branches on
  ``model_config.model_type`` and asserts it is ``language_model`` or ``value_model`` (L273–294):
  :func:`as_language_model` presents a project model type as ``language_model`` for that call only.
* ``FSDPEngine._build_fsdp_module`` (L385) gives forward-only engines a pinned CPU offload policy:
  :func:`no_cpu_offload_on_cpu` switches it off on the CPU platform.
* ``FSDPEngineWithLMHead.prepare_model_inputs`` / ``prepare_model_outputs`` / ``forward_step``
  (L1145, L1332, L1549): overridden by :class:`soft_spatial.actor.train_engine.SoftFSDPEngine`, which relies
  on the ``output_args`` keys ``pad_size``, ``input_ids_rmpad_rolled``, ``temperature_rmpad``
  (remove-padding path) and ``temperature`` (padded path) listed in :data:`OUTPUT_ARGS_KEYS`.
* ``ActorRolloutRefWorker.init_model`` (``verl/workers/engine_workers.py`` L639–643) builds
  ``self.loss_fn = partial(ppo_loss, config=actor_config)``: :func:`loss_config` reads the actor
  config back from that partial.

:mod:`.checks` fails loudly when any of these moves.
"""
from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator, Sequence

OUTPUT_ARGS_KEYS = {
    "remove_padding": ("pad_size", "input_ids_rmpad_rolled", "temperature_rmpad"),
    "padded": ("input_ids_rmpad_rolled", "temperature"),
}


def engine_registry():
    """verl's ``EngineRegistry`` and its private ``_engines`` dict (verl 0.9.1,
    ``verl/workers/engine/base.py``: ``{model_type: {backend: {device: class}}}``)."""
    from verl.workers.engine.base import EngineRegistry

    engines = getattr(EngineRegistry, "_engines", None)
    if not isinstance(engines, dict):
        raise RuntimeError("verl internals changed: EngineRegistry._engines is not a dict "
                           "(see soft_spatial/compat/verl/engine.py)")
    return EngineRegistry, engines


def register_engine(engine_cls, model_type: str, backends: Sequence[str],
                    devices: Sequence[str]) -> None:
    """Register ``engine_cls`` for every (backend, device) not registered yet (idempotent).

    A key already bound to a *different* class is left alone and reported, never overwritten.
    """
    registry, engines = engine_registry()
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
    ``FSDPEngine._build_module``'s assertion, verl 0.9.1); restored afterwards, also on error."""
    original = model_config.model_type
    model_config.model_type = "language_model"
    try:
        yield
    finally:
        model_config.model_type = original


@contextlib.contextmanager
def no_cpu_offload_on_cpu(engine_config) -> Iterator[None]:
    """On the CPU platform, build FSDP without a CPU offload policy.

    ``FSDPEngine._build_fsdp_module`` (verl 0.9.1) gives forward-only (ref) engines
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


def loss_config(loss_fn):
    """The actor config verl bound into the worker's loss: ``ActorRolloutRefWorker.init_model``
    (verl 0.9.1, ``engine_workers.py`` L643) sets ``self.loss_fn = partial(ppo_loss,
    config=actor_config)``; this reads ``loss_fn.keywords["config"]``."""
    keywords = getattr(loss_fn, "keywords", None)
    if not isinstance(keywords, dict) or "config" not in keywords:
        raise RuntimeError(f"verl internals changed: the worker's loss_fn {loss_fn!r} is not a "
                           f"partial with a config keyword (soft_spatial/compat/verl/engine.py)")
    return keywords["config"]
