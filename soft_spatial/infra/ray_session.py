"""The Ray processes of a local training run never outlive it.

When the entry point starts Ray itself (no cluster address), the run gets its own Ray temporary
directory, ``/tmp/ssray-<uid>/<driver pid>-<driver start time>`` (through ``RAY_TMPDIR``). Both
directories are the user's alone (`private_dir`: mode 0700; one that another user owns, or that
others may write, is refused: they could swap the session's files, its token among them). Every
Ray process of the run (GCS, raylet, dashboard and runtime-env agents, log monitor, workers)
writes its logs below that path (its stdout and stderr are files there), and most also name the
path on their command line. The agents and workers rename themselves (``ray::DashboardAgent``,
``ray::IDLE``: Ray's setproctitle overwrites the command line *and* the inherited environment,
``RAY_TMPDIR`` included), so a process belongs to the run when its command line, its environment
or one of its open files holds the path (`session_pids`). Two things remove them once the driver
is gone:

* `start_watchdog`: a small process started before Ray blocks reading a pipe whose only writer is
  the driver. When the driver exits, however it exits (SIGKILL included), the read returns and the
  watchdog kills the run's processes and removes the directory (Ray's own agents otherwise linger
  for 40 s or more after a SIGKILL).
* `reap_orphans`, called at the start of every run, does the same synchronously for every
  directory whose driver is gone (its watchdog was killed too, the machine rebooted).

``python -m soft_spatial.infra.ray_session --reap`` runs `reap_orphans` by hand.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

from soft_spatial.infra.procs import find_pids, open_paths, start_time

__all__ = ["runs_root", "run_ray_dir", "private_dir", "UnsafeDirectory", "session_pids",
           "kill_session", "reap_orphans", "start_watchdog"]

RAY_TMPDIR = "RAY_TMPDIR"  # Ray's temporary directory: set to the run's before Ray starts
_WATCHDOGS: list = []  # the driver keeps its watchdog's Popen (and so the pipe) for its lifetime


def runs_root() -> Path:
    """``/tmp/ssray-<uid>``: short, because Ray's unix socket paths live below it (108 bytes)."""
    return Path("/tmp") / f"ssray-{os.getuid()}"


class UnsafeDirectory(PermissionError):
    """A directory that should be the user's alone is not."""


def private_dir(path: Path, uid: int | None = None) -> Path:
    """``path`` created as a directory of the user ``uid`` (default: this process's) alone, mode
    0700; an existing one is accepted only when it is a real directory (not a link) that ``uid``
    owns and nobody else may write (then its mode is tightened to 0700); otherwise
    `UnsafeDirectory` names it and what is wrong."""
    uid = os.getuid() if uid is None else uid
    try:
        path.mkdir(mode=0o700)
    except FileExistsError:
        pass
    st = os.lstat(path)
    problem = ("is not a directory (a link or a file)" if not stat.S_ISDIR(st.st_mode)
               else f"belongs to uid {st.st_uid}, not {uid}" if st.st_uid != uid
               else f"may be written by others (mode {stat.S_IMODE(st.st_mode):o})"
               if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) else None)
    if problem:
        raise UnsafeDirectory(
            f"{path} {problem}: a local Ray session keeps its sockets, logs and token there, so it "
            f"must be this user's alone; remove it (or have its owner remove it) and run again")
    if stat.S_IMODE(st.st_mode) != 0o700:
        os.chmod(path, 0o700)  # ours, not writable by others: readable by nobody else either
    return path


def run_ray_dir(pid: int | None = None) -> Path:
    """The Ray temporary directory of the driver ``pid`` (default: this process), created, it and
    `runs_root` private to this user (`private_dir`)."""
    pid = os.getpid() if pid is None else pid
    return private_dir(private_dir(runs_root()) / f"{pid}-{start_time(pid)}")


def _driver_alive(path: Path) -> bool:
    pid, _, start = path.name.partition("-")
    return pid.isdigit() and start_time(int(pid)) == start


def session_pids(path: Path) -> list[int]:
    """Pids of this user's processes (not this process) of the run directory ``path``: ``path``
    on their command line (not followed by a digit: ``<pid>-<start>`` is not another run's
    ``<pid>-<start>7``), ``RAY_TMPDIR=<path>`` in their environment, or a file open below it;
    never the driver the directory is named after (``<pid>-<start time>``)."""
    named = re.compile(re.escape(str(path)) + r"(?![0-9])")
    below = str(path) + os.sep
    # a zombie's command line, environment and files cannot be read: the exited are not listed
    by_name = find_pids(cmdline=lambda args: any(named.search(a) for a in args),
                        environ=lambda env: env.get(RAY_TMPDIR) == str(path), same_user=True)
    by_files = [pid for pid in find_pids(same_user=True)  # every process of this user
                if any(f.startswith(below) for f in open_paths(pid))]
    pids = set(by_name) | set(by_files)
    # the driver that owns ``path`` holds Ray's driver logs open below it; its watchdog fires while
    # it is still finishing its exit, and the run is its to end: never one of its session's
    pid, _, start = path.name.partition("-")
    if pid.isdigit() and start_time(int(pid)) == start:
        pids.discard(int(pid))
    return sorted(pids)


def kill_session(path: Path, timeout: float = 30.0) -> list[int]:
    """SIGKILL every process of the run directory ``path`` until none is left (a dying raylet may
    still start a worker), then remove the directory. Returns the pids killed."""
    killed: list[int] = []
    deadline = time.monotonic() + timeout
    while True:
        pids = session_pids(path)
        if not pids or time.monotonic() > deadline:
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            except ProcessLookupError:
                pass
        time.sleep(0.05)
    shutil.rmtree(path, ignore_errors=True)
    return sorted(set(killed))


def reap_orphans(root: Path | None = None) -> list[int]:
    """Kill the processes of every run directory under ``root`` whose driver is gone; returns
    the pids killed."""
    root = runs_root() if root is None else root
    killed: list[int] = []
    if not root.is_dir():
        return killed
    for path in sorted(root.iterdir()):
        if path.is_dir() and not _driver_alive(path):
            killed += kill_session(path)
    return killed


def start_watchdog(path: Path) -> subprocess.Popen:
    """Start the process that cleans up ``path`` when this process exits (see the module doc)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "soft_spatial.infra.ray_session", "--watch", str(path)],
        stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, start_new_session=True)
    _WATCHDOGS.append(proc)
    return proc


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m soft_spatial.infra.ray_session",
                                     description=__doc__.splitlines()[0])
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--watch", type=Path, help="wait for EOF on stdin, then clean up DIR")
    group.add_argument("--reap", action="store_true", help="clean up the runs whose driver is gone")
    args = parser.parse_args(argv)
    if args.reap:
        print(f"killed {len(reap_orphans())} leftover Ray process(es)")
        return
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # outlive a Ctrl-C sent to the driver's group
    sys.stdin.buffer.read()  # returns when the driver has exited
    kill_session(args.watch)


if __name__ == "__main__":
    main()
