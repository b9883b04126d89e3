"""A barrier inside a child process, for the signal tests: the test knows the child reached a point
because the child says so, never because some time passed.

With ``SOFT_SPATIAL_TEST_BARRIER=DIR`` and ``SOFT_SPATIAL_TEST_BARRIER_AFTER=module:Qual.name`` in
its environment, importing this module wraps that function: when its first call returns, the
process writes its pid to ``DIR/reached`` (atomically) and then blocks opening the FIFO
``DIR/release`` for reading. There it stays until the test opens ``DIR/release`` for writing (it goes
on) or signals it. Nothing happens without the variables.

Loaded in a child as ``VERL_USE_EXTERNAL_MODULES=barrier`` (verl imports it: the model merger, every
Ray process of a training run) or as ``sitecustomize`` from ``tests/support/barrier_site`` (any Python
child), with ``tests/support/`` on ``PYTHONPATH``. Use :func:`arm`, :func:`wait_reached` and
:func:`release` in the test.
"""
from __future__ import annotations

import functools
import importlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

DIR_ENV = "SOFT_SPATIAL_TEST_BARRIER"
AFTER_ENV = "SOFT_SPATIAL_TEST_BARRIER_AFTER"
SUPPORT = Path(__file__).resolve().parent
ROOT = SUPPORT.parents[1]


def hangup_default() -> None:
    """``preexec_fn`` of a child a test will hang up: SIGHUP's default action (it ends the
    process), whatever this process inherited. A suite started under ``nohup`` ignores SIGHUP, and
    an ignored disposition passes to every child: the test's SIGHUP then ended nothing and its
    wait never returned."""
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


# -- in the child ---------------------------------------------------------------------------------
def _wait_here(directory: Path) -> None:
    tmp = directory / f".reached.{os.getpid()}"
    tmp.write_text(str(os.getpid()))
    os.replace(tmp, directory / "reached")
    with open(directory / "release", "rb") as f:  # blocks until the test opens it for writing
        f.read()


def _install() -> None:
    directory, target = os.environ.get(DIR_ENV), os.environ.get(AFTER_ENV)
    if not directory or not target:
        return
    if ("soft_spatial.plugin" in os.environ.get("VERL_USE_EXTERNAL_MODULES", "")
            and "soft_spatial.plugin" not in sys.modules):
        # a training run's Ray process, where verl imports this module before the plugin: the
        # plugin's import registers the CPU platform before verl's trainer imports. Where the
        # plugin is already imported (or is being imported: the driver's ``run_verl`` imports it,
        # and its registration imports verl, which imports this module), it is not called again
        importlib.import_module("soft_spatial.plugin")
    module_name, _, qualname = target.partition(":")
    owner = importlib.import_module(module_name)
    *path, name = qualname.split(".")
    for part in path:
        owner = getattr(owner, part)
    original = getattr(owner, name)
    state = {"done": False}

    @functools.wraps(original)
    def wrapper(*args, **kwargs):
        result = original(*args, **kwargs)
        if not state["done"]:
            state["done"] = True
            _wait_here(Path(directory))
        return result

    setattr(owner, name, wrapper)


_install()


# -- in the test ----------------------------------------------------------------------------------
def arm(directory: Path, after: str, env: dict | None = None, site: bool = False) -> dict:
    """The environment (from ``env`` or ours) for a child that stops after ``after`` returns;
    ``site``: load this module as ``sitecustomize`` (a child that does not import verl)."""
    directory.mkdir(parents=True, exist_ok=True)
    os.mkfifo(directory / "release")
    env = dict(os.environ if env is None else env)
    paths = [str(ROOT), str(SUPPORT)] + [str(SUPPORT / "barrier_site")] * site
    env["PYTHONPATH"] = os.pathsep.join(paths + [p for p in [env.get("PYTHONPATH")] if p])
    env[DIR_ENV], env[AFTER_ENV] = str(directory), after
    return env


def wait_reached(directory: Path, child: subprocess.Popen, within: float = 300.0,
                 log: Path | None = None) -> int:
    """The pid that reached the barrier, once it has (a child that exits first fails the test with
    the end of its output: its stdout pipe, or ``log`` where it writes to a file; ``within`` only
    bounds a hang)."""
    deadline = time.monotonic() + within
    marker = directory / "reached"
    while not marker.exists():
        if child.poll() is not None:
            out = child.stdout.read() if child.stdout else ""
            if log is not None and Path(log).exists():
                out += Path(log).read_text(errors="replace")
            raise AssertionError(f"the child exited ({child.returncode}) before the barrier:\n{out[-4000:]}")
        if time.monotonic() > deadline:
            raise AssertionError(f"the child did not reach the barrier within {within} s")
        time.sleep(0.05)
    return int(marker.read_text())


def wait_for(predicate, what: str, limit_s: float = 120.0) -> None:
    """Wait until ``predicate()`` holds: a state, never a time, is what the test asserts
    (``limit_s`` only bounds a failure, named by ``what``)."""
    end = time.monotonic() + limit_s
    while not predicate():
        if time.monotonic() > end:
            raise AssertionError(f"never happened: {what}")
        time.sleep(0.1)


def release(directory: Path) -> None:
    """Let the child at the barrier go on (it must be waiting there)."""
    with open(directory / "release", "wb"):
        pass


def interrupt(child: subprocess.Popen, sig: int, within: float = 120.0) -> str:
    """Send ``sig`` to ``child`` and check it ended as a command interrupted by it ends
    (``soft_spatial.infra.signals.command``): exit 128 + the signal, one line naming it, no
    traceback. Returns its stderr."""
    child.send_signal(sig)
    _, err = child.communicate(timeout=within)
    assert child.returncode == 128 + sig, err[-3000:]
    assert f"interrupted by {signal.Signals(sig).name}" in err and "Traceback" not in err, err[-3000:]
    return err
