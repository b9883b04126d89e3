"""This machine's processes, read from ``/proc`` (Linux): a process's state and start time, and a
scan for the processes whose ``/proc/<pid>/<file>`` matches. Used by the launcher (its Ray
processes carry a marker variable) and by the training driver's Ray session (its processes name
the session directory on their command line)."""
from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

__all__ = ["stat_fields", "alive", "start_time", "find_pids", "open_paths"]


def stat_fields(pid: int) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name, from field 3 (the state) on;
    None when there is no such process. (The name, in parentheses, may hold spaces.)"""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def alive(pid: int) -> bool:
    """Whether ``pid`` is a process that has not exited (a zombie has)."""
    fields = stat_fields(pid)
    return bool(fields) and fields[0] != "Z"


def start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (field 22; with the pid, a unique
    identity)."""
    fields = stat_fields(pid)
    return fields[19] if fields else None


def find_pids(file: str, match: Callable[[bytes], bool], same_user: bool = False) -> list[int]:
    """Pids (not this process) whose ``/proc/<pid>/<file>`` (e.g. ``cmdline``, ``environ``)
    satisfies ``match``; with ``same_user``, only this user's processes."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if same_user and entry.stat().st_uid != os.getuid():
                continue
            if match((entry / file).read_bytes()):
                pids.append(int(entry.name))
        except OSError:
            continue
    return pids


def open_paths(pid: int) -> list[str]:
    """The targets of ``/proc/<pid>/fd/*`` (files, sockets, pipes as ``readlink`` names them);
    empty when the process is gone, a zombie, or not readable."""
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return []
    paths = []
    for fd in fds:
        try:
            paths.append(os.readlink(f"/proc/{pid}/fd/{fd}"))
        except OSError:
            continue
    return paths
