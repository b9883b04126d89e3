"""torch's and verl's imports without the garbage collector's passes over them.

Importing verl (torch, tensordict, transformers, the plugin) allocates some 600,000 objects that
live as long as the process, and Python's collector traverses the growing heap again and again
meanwhile: about a fifth of the import's 6-7 s of CPU (1.3 s, measured on the 2-core machine with
``gc.callbacks``), paid by every process of a training run (the driver and each Ray worker: the
TaskRunner, the training workers, the rollout servers, the agent-loop, reward-loop and
load-balancer workers). `defer_collection` makes the next import of each named package run with
the collector off, then collects once and freezes what is left (``gc.freeze``: the modules'
objects, kept for the life of the process anyway, are left out of every later collection too).
A package already imported, or imported with the collector already off, is left as it is.
`for_command` adds the heap frozen at exit: the interpreter's collections at exit then pass over
none of it (1-3 s after a command that imported torch, transformers and verl had ended).

`for_command` is installed by every command (`soft_spatial.infra.signals.command`; not verl's model
merger, `compat/verl/merger.py`, which the layers keep from infra); `defer_collection`, through
``runtime_env.worker_process_setup_hook`` (`WORKER_SETUP_HOOK`, set by ``soft_spatial.train``), in
every Ray worker of a training run before it imports anything of the run.
"""
from __future__ import annotations

import atexit
import gc
import importlib.abc
import importlib.util
import sys
from collections.abc import Iterable

__all__ = ["PACKAGES", "WORKER_SETUP_HOOK", "defer_collection", "for_command", "setup_worker"]

#: the packages whose import is deferred (verl imports torch first: its own import covers both)
PACKAGES = ("torch", "verl")
#: Ray's ``worker_process_setup_hook`` for a training run's workers
WORKER_SETUP_HOOK = f"{__name__}.setup_worker"


def _without_collection(exec_module, started):
    def run(module) -> None:
        started()
        if not gc.isenabled():  # within another deferred import (or a caller's choice): as is
            exec_module(module)
            return
        gc.disable()
        try:
            exec_module(module)
        finally:
            gc.collect()  # the import's garbage, once
            gc.freeze()
            gc.enable()
    return run


class _Deferred(importlib.abc.MetaPathFinder):
    """Finds nothing itself: gives the top-level packages it names the spec the other finders
    give, with its loader's ``exec_module`` run without collection (`_without_collection`); a
    package is dropped once its import runs (a spec only looked up, ``importlib.util.find_spec``,
    leaves it named)."""

    def __init__(self, names: Iterable[str]):
        self.names = set(names)
        self._looking = False

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in self.names or self._looking:
            return None
        self._looking = True
        try:
            spec = importlib.util.find_spec(fullname)  # the other finders'
        finally:
            self._looking = False
        loader = getattr(spec, "loader", None)
        if loader is not None and hasattr(loader, "exec_module"):
            loader.exec_module = _without_collection(loader.exec_module, lambda: self._done(fullname))
        return spec

    def _done(self, name: str) -> None:
        self.names.discard(name)
        if not self.names and self in sys.meta_path:
            sys.meta_path.remove(self)


def defer_collection(names: Iterable[str] = PACKAGES) -> None:
    """Run the next import of each top-level package in ``names`` that this process has not
    imported yet without collection, then collect once and freeze its objects (module doc)."""
    names = [n for n in names if n not in sys.modules]
    if names and not any(isinstance(f, _Deferred) for f in sys.meta_path):
        sys.meta_path.insert(0, _Deferred(names))


def for_command() -> None:
    """For a process that ends with its command: `defer_collection`, and the heap frozen at exit
    (after the exit hooks registered later, Ray's among them)."""
    atexit.unregister(gc.freeze)
    atexit.register(gc.freeze)
    defer_collection()


def setup_worker() -> None:
    """Ray's ``worker_process_setup_hook`` of a training run's workers: `defer_collection`."""
    defer_collection()
