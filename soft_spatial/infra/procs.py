"""This machine's processes, through psutil: whether a process lives, its start time (with the pid,
a unique identity), the processes whose command line or environment matches, and a process's open
files; `end_group` ends a child's process group. Used by the launcher (its Ray processes carry a
marker variable), by the training driver's Ray session (its processes name the session directory
on their command line) and by the export (its merger)."""
from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Callable

import psutil

__all__ = ["alive", "start_time", "find_pids", "open_paths", "end_group"]


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


def find_pids(cmdline: Callable[[list[str]], bool] | None = None,
              environ: Callable[[dict[str, str]], bool] | None = None, same_user: bool = False) -> list[int]:
    """Pids (not this process) whose command line (its arguments) satisfies ``cmdline`` or whose
    environment satisfies ``environ`` (without either: every process); with ``same_user``, only
    this user's processes. A process that cannot be read (another user's, a zombie's) does not match."""
    attrs = ["pid", "uids"] + ["cmdline"] * bool(cmdline) + ["environ"] * bool(environ)
    pids = []
    for proc in psutil.process_iter(attrs, ad_value=None):
        info = proc.info
        mine = info["uids"] is not None and info["uids"].effective == os.getuid()
        if info["pid"] == os.getpid() or (same_user and not mine):
            continue
        if ((cmdline is None and environ is None)
                or (cmdline is not None and info["cmdline"] is not None and cmdline(info["cmdline"]))
                or (environ is not None and info["environ"] is not None and environ(info["environ"]))):
            pids.append(info["pid"])
    return sorted(pids)


def open_paths(pid: int) -> list[str]:
    """The paths of the regular files ``pid`` holds open; empty when the process is gone, a zombie,
    or not readable."""
    try:
        return [f.path for f in psutil.Process(pid).open_files()]
    except psutil.Error:
        return []


def end_group(proc: subprocess.Popen) -> int:
    """SIGKILL the process group of ``proc`` (started with ``start_new_session=True``, so that it
    leads its own group) and reap ``proc``: it and every process it started in its group end with
    the caller, who is being interrupted. Returns ``proc``'s exit status. The group is killed before
    ``proc`` is reaped, so its id cannot have been reused by then."""
    if proc.returncode is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    return proc.wait()
