"""The environment every Ray process of a run needs: one list, used by training (``train.py``), the
rollout replicas (``rollout/replica.py``) and the launcher (``launch/``).

Ray workers do not inherit the driver's environment when they join a running cluster, so these
variables travel explicitly: in every ``ray start`` (the launcher), in
``ray_kwargs.ray_init.runtime_env.env_vars`` (training) and in a replica actor's runtime_env.
"""
from __future__ import annotations

import os
import re
from collections.abc import Mapping

__all__ = ["EXTRA_ENV", "FORWARD_ENV", "PLUGIN", "forward_names", "forwarded_env", "plugin_env"]

PLUGIN = "soft_spatial.plugin"
# plugin registration, SGLang plugins, the platform, the offline hub, the import path, tokenizers
FORWARD_ENV = ("VERL_USE_EXTERNAL_MODULES", "SGLANG_PLUGINS", "SGLANG_EXTERNAL_MODEL_PACKAGE",
               "VERL_PLATFORM", "HF_HUB_OFFLINE", "PYTHONPATH", "TOKENIZERS_PARALLELISM")
EXTRA_ENV = "SOFT_SPATIAL_FORWARD_ENV"  # more names, space or comma separated
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def forward_names(environ: Mapping[str, str] = os.environ) -> list:
    """:data:`FORWARD_ENV` and the names in ``$SOFT_SPATIAL_FORWARD_ENV``, each once, in order."""
    extra = environ.get(EXTRA_ENV, "").replace(",", " ").split()
    for name in extra:
        if not _NAME.fullmatch(name):
            raise ValueError(f"{EXTRA_ENV}: bad variable name {name!r}")
    return list(dict.fromkeys([*FORWARD_ENV, *extra]))


def forwarded_env(environ: Mapping[str, str] = os.environ) -> dict:
    """``{name: value}`` of the forwarded variables that are set (and not empty) in ``environ``."""
    return {k: environ[k] for k in forward_names(environ) if environ.get(k)}


def plugin_env(device: str, environ: Mapping[str, str] = os.environ) -> dict:
    """The forwarded environment with the plugin added to ``VERL_USE_EXTERNAL_MODULES``, tokenizer
    threads off and, for ``device == "cpu"``, verl's CPU platform (set before verl or Ray start)."""
    env = forwarded_env(environ)
    mods = [m for m in env.get("VERL_USE_EXTERNAL_MODULES", "").split(",") if m]
    env["VERL_USE_EXTERNAL_MODULES"] = ",".join(dict.fromkeys(mods + [PLUGIN]))
    env["TOKENIZERS_PARALLELISM"] = "false"
    if device == "cpu":
        env["VERL_PLATFORM"] = "cpu"
    return env
