"""A child command tied to its parent: it, and everything it starts, ends with the parent, however
the parent ends (a return, an exception, SIGTERM, SIGHUP when the terminal closes, SIGKILL from the
OOM killer or Slurm).

A stage of a long command (a warm start, a training run with its Ray cluster, a GPU-kit job with its
SGLang engines) runs in its own session, so that a Ctrl-C meant for the parent reaches it only
through the parent's cleanup. A cleanup in the parent runs only when the parent lives to run it;
SIGKILL and a crashed interpreter skip it. So `start` also starts a **watchdog**: a small process in
a session of its own, holding the read end of a pipe whose only write end the parent holds. The
kernel closes that end whenever the parent ends, by any means; the watchdog reads EOF and kills
the child's process group and every process whose environment carries the tether's marker
(``SOFT_SPATIAL_TETHER``, inherited by everything the child starts, also by processes that start a
session of their own, such as SGLang's schedulers and Ray's daemons): first SIGTERM, then SIGKILL
after a grace period. Nothing depends on a signal handler in the parent.

    child = tether.start([sys.executable, "-m", "soft_spatial.train", ...], stdout=log)
    try:
        child.wait()
    finally:
        tether.stop(child)   # leftovers killed, watchdog gone, when this returns

`stop` closes the pipe itself and waits for the watchdog, so when it returns nothing of the child
is left (the watchdog's own last act). The parent's ordinary exit does the same without waiting.
"""
from __future__ import annotations

import argparse
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass

from soft_spatial.infra.procs import alive, find_pids

__all__ = ["MARKER_VAR", "Tethered", "start", "stop", "marked_pids", "kill_marked"]

MARKER_VAR = "SOFT_SPATIAL_TETHER"
GRACE_S = 10.0


@dataclass
class Tethered:
    """A tethered child: its `Popen`, the watchdog's, and the marker its processes carry."""

    proc: subprocess.Popen
    watchdog: subprocess.Popen
    marker: str

    @property
    def pid(self) -> int:
        return self.proc.pid

    def wait(self, timeout: float | None = None) -> int:
        return self.proc.wait(timeout)

    def poll(self) -> int | None:
        return self.proc.poll()

    @property
    def returncode(self) -> int | None:
        return self.proc.returncode


def marked_pids(marker: str) -> list[int]:
    """This user's processes whose environment carries ``marker`` (not this process)."""
    return find_pids(environ=lambda env: env.get(MARKER_VAR) == marker, same_user=True)


def kill_marked(marker: str, pgid: int | None = None, grace_s: float = GRACE_S) -> list[int]:
    """End process group ``pgid`` and every process carrying ``marker``: SIGTERM, then SIGKILL to
    what is left after ``grace_s``; returns the pids signalled. A process that exits between the
    lookup and the signal is skipped."""
    signalled: set[int] = set()
    for sig in (signal.SIGTERM, signal.SIGKILL):
        pids = marked_pids(marker)
        if pgid is not None:
            try:
                os.killpg(pgid, sig)
            except (ProcessLookupError, PermissionError):
                pass
        for pid in pids:
            try:
                os.kill(pid, sig)
                signalled.add(pid)
            except (ProcessLookupError, PermissionError):
                pass
        if sig == signal.SIGKILL:
            break
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and (
                any(alive(p) for p in marked_pids(marker)) or _group_alive(pgid)):
            time.sleep(0.2)
    return sorted(signalled)


def _group_alive(pgid: int | None) -> bool:
    """Whether a process of group ``pgid`` still runs. Zombies do not count: the child, the
    group's leader, stays one until its parent reaps it, and `stop`'s caller reaps it only once
    the watchdog is done (counting it, every stop of a running child waited out the grace)."""
    if pgid is None:
        return False
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return any(group_of(pid) == pgid and alive(pid) for pid in find_pids(same_user=True))


def group_of(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except (ProcessLookupError, PermissionError):
        return None


def start(argv: Sequence[str], grace_s: float = GRACE_S, **popen) -> Tethered:
    """Start ``argv`` in its own session, tied to this process (module docstring). ``popen``
    passes to `subprocess.Popen` (``stdout``, ``env``, ``cwd``, …); the marker is added to the
    child's environment."""
    marker = f"{os.getpid()}-{secrets.token_hex(8)}"
    env = dict(popen.pop("env", None) or os.environ)
    env[MARKER_VAR] = marker
    # the watchdog first: it must be watching before the child can start anything
    watchdog = subprocess.Popen(
        [sys.executable, "-m", "soft_spatial.infra.tether", "--watch", marker,
         "--grace", str(grace_s)],
        stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, start_new_session=True,
        env={k: v for k, v in os.environ.items() if k != MARKER_VAR})
    try:
        proc = subprocess.Popen(list(map(str, argv)), env=env, start_new_session=True,
                                close_fds=True, **popen)
    except BaseException:
        watchdog.stdin.close()
        watchdog.wait()
        raise
    watchdog.stdin.write(f"{proc.pid}\n".encode())
    watchdog.stdin.flush()
    return Tethered(proc, watchdog, marker)


def stop(child: Tethered) -> int | None:
    """End ``child`` and everything it started (if still running), wait until the watchdog has
    done so, and reap the child; returns its exit status."""
    try:
        child.watchdog.stdin.close()
    except OSError:
        pass
    child.watchdog.wait()
    try:
        return child.proc.wait(timeout=5)
    except subprocess.TimeoutExpired:  # not killable by this user: nothing more to do
        return child.proc.returncode


def _watch(marker: str, grace_s: float) -> None:
    """The watchdog: read the child's pid, wait for EOF (the parent gone or `stop`), then kill."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # outlive a Ctrl-C sent to the parent's group
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # and the terminal closing
    first = sys.stdin.buffer.readline()
    pgid = int(first) if first.strip() else None
    sys.stdin.buffer.read()  # returns when the write end is closed
    kill_marked(marker, pgid, grace_s)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m soft_spatial.infra.tether",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--watch", required=True, metavar="MARKER")
    parser.add_argument("--grace", type=float, default=GRACE_S)
    args = parser.parse_args(argv)
    _watch(args.watch, args.grace)


if __name__ == "__main__":
    main()
