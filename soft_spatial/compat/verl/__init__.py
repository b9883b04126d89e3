"""What soft_spatial touches in verl beyond its documented seams (pinned to verl 0.9.1), by verl area.

Everything else in the project uses verl's public seams (registries, config dataclasses, the engine's
overridable methods). Each use of a private name is one named function, its docstring saying what it
touches, where, and for which version:

* :mod:`.engine`: the training engine and its worker (engine registry, FSDP build, ``output_args``
  keys, the worker's loss config);
* :mod:`.trainer`: the PPO trainer, its resource pools and its metrics logger (reference log-probs,
  validation batches, ``Tracking`` / ``FileLogger``);
* :mod:`.rollout`: the rollout adapter registry, the replica's server fields, verl's SGLang adapter;
* :mod:`.merger`: verl's model merger run with weights-only loads (export);
* :mod:`.checks`: the pinned version and the guards that name what moved (``tests/compat/test_verl.py``).
"""
