"""This machine's processes, through psutil: whether a process lives, its start time (with the pid,
a unique identity), and the processes whose command line, environment or session matches. Used by
the tether (``infra/tether.py``: the processes of a child command, by its marker and its session)."""
from __future__ import annotations

import os
from collections.abc import Callable, Collection

import psutil

__all__ = ["alive", "start_time", "find_pids"]


def alive(pid: int) -> bool:
    """Whether ``pid`` is a process that has not exited (a zombie has)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def start_time(pid: int) -> str | None:
    """The process's start time (seconds since the epoch, to the clock tick: ``"%.2f"``, fixed for
    the process's life); None when there is no such process."""
    try:
        return f"{psutil.Process(pid).create_time():.2f}"
    except psutil.Error:
        return None


def _session(pid: int) -> int | None:
    try:
        return os.getsid(pid)
    except OSError:
        return None


def find_pids(cmdline: Callable[[list[str]], bool] | None = None,
              environ: Callable[[dict[str, str]], bool] | None = None, same_user: bool = False,
              sessions: Collection[int] = ()) -> list[int]:
    """Pids (not this process) whose command line (its arguments) satisfies ``cmdline``, whose
    environment satisfies ``environ`` or whose session is one of ``sessions`` (without any of the
    three: every process); with ``same_user``, only this user's processes. A process that cannot
    be read (another user's, a zombie's) does not match by command line or environment."""
    attrs = ["pid", "uids"] + ["cmdline"] * bool(cmdline) + ["environ"] * bool(environ)
    every = cmdline is None and environ is None and not sessions
    pids = []
    for proc in psutil.process_iter(attrs, ad_value=None):
        info = proc.info
        mine = info["uids"] is not None and info["uids"].effective == os.getuid()
        if info["pid"] == os.getpid() or (same_user and not mine):
            continue
        if (every
                or (cmdline is not None and info["cmdline"] is not None and cmdline(info["cmdline"]))
                or (environ is not None and info["environ"] is not None and environ(info["environ"]))
                or (sessions and _session(info["pid"]) in sessions)):
            pids.append(info["pid"])
    return sorted(pids)
