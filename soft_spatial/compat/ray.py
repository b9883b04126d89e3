"""What soft_spatial relies on in Ray beyond its documented API (written against ray 2.60).

The launcher needs nothing private: its node address (``soft_spatial/launch/plan.py``; the
former bash launcher read ``ray._private.services.get_node_ip_address``) is Ray's public
``ray.util.get_node_ip_address`` (same function body in 2.60). :func:`node_ip_address` is the one
call to use, and :func:`check_internals` says when Ray changes it.

:func:`keep_sigterm_handler` keeps the driver's own SIGTERM handler through ``ray.init``, which
replaces it; it touches the private ``ray._private.utils.set_sigterm_handler`` (ray 2.60), and
:func:`check_sigterm_seam` says when that or the calls it relies on change.

A local Ray that a training run starts for itself is kept to this machine (:func:`loopback_only`:
every Ray process listens on 127.0.0.1 instead of every interface) and uses the run's own token
(``infra.ray_auth``), which :func:`reload_auth_settings` makes this process see after its Ray
was imported. :func:`check_internals` covers both.
"""
from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import Callable, Iterator

__all__ = ["RAY_VERSION", "node_ip_address", "check_internals", "keep_sigterm_handler",
           "check_sigterm_seam", "LOOPBACK_ENV", "loopback_only", "reload_auth_settings"]

RAY_VERSION = "2.60.0"  # checked with; pyproject allows ray>=2.41

#: Ray's switch for a machine that is not part of a cluster: "0" makes the node's address the
#: loopback address (``ray._private.ray_constants.ENABLE_RAY_CLUSTER``, what Ray does on macOS and
#: Windows), and every Ray server then binds to it alone
LOOPBACK_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


def node_ip_address() -> str:
    """This node's IP address as Ray sees it: the running node's address inside a Ray process,
    else the address this host reaches the network from (``ray.util.get_node_ip_address``)."""
    import ray.util

    return ray.util.get_node_ip_address()


def loopback_only(environ: dict | None = None) -> None:
    """Make a Ray that this process starts next listen on 127.0.0.1 only (the GCS, the raylet, the
    workers, the dashboard and runtime-env agents), not on every interface: for a single-machine
    run, which needs no other machine to reach it.

    Ray 2.60 takes the node's address from ``ray._private.services.get_node_ip_address``, which
    gives the loopback address when ``ray_constants.ENABLE_RAY_CLUSTER`` is false (read from
    :data:`LOOPBACK_ENV` when ``ray_constants`` is imported); its gRPC servers bind to the loopback
    interface alone when the node's address is 127.0.0.1. The variable goes into ``environ``
    (default ``os.environ``: every Ray process inherits it) and the constant of this process, whose
    Ray may have been imported already, is set to match."""
    import os
    import sys

    (os.environ if environ is None else environ)[LOOPBACK_ENV] = "0"
    constants = sys.modules.get("ray._private.ray_constants")
    if constants is not None:
        constants.ENABLE_RAY_CLUSTER = False


def reload_auth_settings() -> None:
    """Make this process read Ray's authentication settings (``RAY_AUTH_MODE``,
    ``RAY_AUTH_TOKEN_PATH``) again: Ray 2.60 reads them into its C++ config when ``ray`` is
    imported, and a driver whose Ray was imported before they were set (verl imports it) would
    otherwise connect without the token its own cluster requires (``ray._raylet.Config.initialize``,
    as Ray's ``_enable_token_auth`` does, and the token loader's cache reset)."""
    from ray._raylet import AuthenticationTokenLoader, Config

    Config.initialize("")
    AuthenticationTokenLoader.instance().reset_cache()


def check_internals() -> list:
    """Problems with what this module relies on (empty = OK)."""
    import inspect

    import ray._private.ray_constants as constants
    import ray._private.services as services
    import ray._raylet as raylet
    import ray.util

    problems = []
    if not callable(getattr(ray.util, "get_node_ip_address", None)):
        problems.append("ray.util.get_node_ip_address is gone (node_ip_address)")
    if getattr(constants, "ENABLE_RAY_CLUSTERS_ENV_VAR", None) != LOOPBACK_ENV or not hasattr(
            constants, "ENABLE_RAY_CLUSTER"):
        problems.append(f"ray_constants no longer reads {LOOPBACK_ENV} into ENABLE_RAY_CLUSTER (loopback_only)")
    if "ray_constants.ENABLE_RAY_CLUSTER" not in inspect.getsource(services.get_node_ip_address):
        problems.append("ray._private.services.get_node_ip_address no longer consults "
                        "ray_constants.ENABLE_RAY_CLUSTER (loopback_only)")
    for name, attr in (("Config", "initialize"), ("AuthenticationTokenLoader", "instance")):
        if not callable(getattr(getattr(raylet, name, None), attr, None)):
            problems.append(f"ray._raylet.{name}.{attr} is gone (reload_auth_settings)")
    return problems


@contextlib.contextmanager
def keep_sigterm_handler(reinstall: Callable[[], None]) -> Iterator[None]:
    """Within the block, ``ray.init`` leaves this process's SIGTERM handler in place: Ray's own
    are not installed and ``reinstall`` (``soft_spatial.infra.signals.reinstall``) runs each time
    ``ray.init`` returns.

    Ray 2.60's ``ray.init`` takes SIGTERM over in the driver: ``ray._private.worker.init`` (L1679)
    installs a handler that calls ``sys.exit``, a head node it starts
    (``ray._private.node.Node._register_shutdown_hooks``, L664) one that kills Ray's processes
    and exits 1, both through the private ``ray._private.utils.set_sigterm_handler``; and the core
    worker it connects installs absl's C-level failure signal handler, which prints ``*** SIGTERM
    received ***`` with a stack and left a training run to end with exit -6 (SIGABRT). Within the
    block ``set_sigterm_handler`` does nothing (a SIGTERM during ``ray.init`` raises as anywhere
    else; Ray's node processes still go at exit: its atexit hook stays), and the module attribute
    ``ray.init`` (which callers that ``import ray`` look up when they call it: verl 0.9.1's
    ``run_ppo``) re-installs the handler when it returns, over absl's.
    :func:`check_sigterm_seam` checks all three.
    """
    import ray
    import ray._private.utils as ray_utils

    original_init, original_set = ray.init, ray_utils.set_sigterm_handler

    @functools.wraps(original_init)
    def init(*args, **kwargs):
        try:
            return original_init(*args, **kwargs)
        finally:
            reinstall()

    def keep(handler) -> None:  # Ray's handlers are not installed: ours stays
        return None

    ray.init, ray_utils.set_sigterm_handler = init, keep
    try:
        yield
    finally:
        ray.init, ray_utils.set_sigterm_handler = original_init, original_set


def check_sigterm_seam() -> list:
    """What :func:`keep_sigterm_handler` relies on (empty = OK): ``ray.init`` is a module attribute
    that verl's ``run_ppo`` calls through the module (``ray.init(``) when Ray is not running, and
    Ray installs its SIGTERM handlers through ``ray._private.utils.set_sigterm_handler``."""
    import ray
    import ray._private.node as ray_node
    import ray._private.utils as ray_utils
    import ray._private.worker as ray_worker

    problems = []
    if not callable(getattr(ray, "init", None)):
        problems.append("ray.init is gone (keep_sigterm_handler)")
    if not callable(getattr(ray_utils, "set_sigterm_handler", None)):
        problems.append("ray._private.utils.set_sigterm_handler is gone (keep_sigterm_handler)")
    for where, fn in (("ray._private.worker.init", ray_worker.init),
                      ("Node._register_shutdown_hooks", ray_node.Node._register_shutdown_hooks)):
        if "ray._private.utils.set_sigterm_handler(" not in inspect.getsource(fn):
            problems.append(f"{where} no longer installs its SIGTERM handler through "
                            f"ray._private.utils.set_sigterm_handler (keep_sigterm_handler)")
    if "signal.signal(" in inspect.getsource(ray_worker.init):
        problems.append("ray._private.worker.init now calls signal.signal itself (keep_sigterm_handler)")
    from verl.trainer.main_ppo import run_ppo

    src = inspect.getsource(run_ppo)
    if "ray.init(" not in src or "ray.is_initialized()" not in src:
        problems.append("verl's run_ppo no longer calls ray.init( when Ray is not initialised "
                        "(keep_sigterm_handler would not see it)")
    return problems
