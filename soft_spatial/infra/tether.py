"""The one way a command starts a child process: the child, and everything it starts, ends with its
parent, however the parent ends (a return, an exception, SIGTERM, SIGINT, SIGHUP when the terminal
closes, SIGKILL from the OOM killer or Slurm). Training's local Ray (``infra/ray_session.py``), the
launcher's Ray processes and its command, the ablation's and the learning runner's stages, the GPU
kit's stages and jobs and export's merger all start here.

**What belongs to a child** (one rule, :func:`members`): the processes of its **session** (the
child leads a session of its own; everything it starts stays there unless it calls ``setsid``,
and no process can join a session from outside, so no other program's process is ever in it) and
every process whose environment carries the child's **marker** (``SOFT_SPATIAL_TETHER``, inherited
by everything the child starts, also by processes that start a session of their own, such as
SGLang's schedulers). The two together cover Ray's agents and workers, which rename themselves
(``ray::DashboardAgent``: Ray's setproctitle overwrites the command line *and* the inherited
environment) but stay in the session. A session is trusted while its leader carries the marker
or is gone (a session's id is not reused while a member lives). Nothing is ever found by its
command line or the files it names or holds open: a user's ``tail -f`` on a child's log is not
the child's. A child started under another tether carries both markers (comma-separated), so an
outer tether's reaper ends it too.

**The reaper** (:func:`reap`): SIGTERM to the child first (it ends what it started in its own
order), then to every member left, then, a grace period after the first, SIGKILL to what is left
(and to what a dying process started meanwhile) until none is left.

**The watchdog**: a cleanup in the parent runs only when the parent lives to run it; SIGKILL and a
crashed interpreter skip it. So `start` also starts a small process in a session of its own,
holding the read end of a pipe whose only write end the parent holds. The kernel closes that end
whenever the parent ends, by any means; the watchdog reads EOF and runs the reaper. Nothing depends
on a signal handler in the parent.

    child = tether.start([sys.executable, "-m", "soft_spatial.train", ...], stdout=log)
    try:
        child.wait()
    finally:
        tether.stop(child)   # leftovers killed, watchdog gone, when this returns

or, for a child whose output the caller reads as ``subprocess.run`` gives it, :func:`run`.
`stop` closes the pipe itself and waits for the watchdog, so when it returns nothing of the child
is left (the watchdog's own last act). The parent's ordinary exit does the same without waiting.

A child meant to outlive its command (the launcher's ``head`` and ``worker``: Ray in the
background until ``stop``) is started with ``watch=False`` and a marker of the caller's choosing
(the run's); the later command ends it with :func:`reap` (the marker and the recorded pid).
"""
from __future__ import annotations

import argparse
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from soft_spatial.infra.procs import alive, find_pids

__all__ = ["MARKER_VAR", "Tethered", "start", "stop", "run", "log_tail", "members", "marked_pids", "reap"]

MARKER_VAR = "SOFT_SPATIAL_TETHER"
GRACE_S = 10.0
SWEEP_S = 30.0  # after SIGKILL: how long to go on killing what dying processes still start


@dataclass
class Tethered:
    """A tethered child: its `Popen`, the watchdog's (None for a child meant to outlive its
    command), and the marker its processes carry."""

    proc: subprocess.Popen
    watchdog: subprocess.Popen | None
    marker: str
    grace_s: float = GRACE_S

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


def _carries(env: dict[str, str], marker: str) -> bool:
    return marker in (env.get(MARKER_VAR) or "").split(",")


def marked_pids(marker: str) -> list[int]:
    """This user's processes whose environment carries ``marker`` (not this process)."""
    return find_pids(environ=lambda env: _carries(env, marker), same_user=True)


def members(marker: str, sessions: Collection[int] = (), by_marker: bool = True) -> list[int]:
    """This user's live processes of a tethered child (not this process): those carrying
    ``marker`` (unless ``by_marker`` is false) and the members of each session in ``sessions``
    (the children's pids) whose leader carries ``marker`` or is gone (module doc)."""
    marked = set(marked_pids(marker))
    trusted = {s for s in sessions if s in marked or not alive(s)}
    in_sessions = set(find_pids(sessions=trusted, same_user=True)) if trusted else set()
    return sorted(p for p in (marked if by_marker else set()) | in_sessions if alive(p))


def reap(marker: str, sessions: Collection[int] = (), grace_s: float = GRACE_S,
         by_marker: bool = True) -> list[int]:
    """End the processes of a tethered child (:func:`members`): SIGTERM to the session leaders in
    ``sessions`` first (each ends what it started in its own order: ``ray start`` stops its raylet
    before its GCS, where a raylet whose GCS went first waits for it), then to every member left;
    SIGKILL to what is left ``grace_s`` after the first SIGTERM, and to anything started
    meanwhile, until none is left (or :data:`SWEEP_S` passed). Returns the pids signalled. A
    process that exits between the lookup and the signal is skipped."""
    signalled: set[int] = set()

    def send(pids: Collection[int], sig: int) -> None:
        for pid in pids:
            try:
                os.kill(pid, sig)
                signalled.add(pid)
            except (ProcessLookupError, PermissionError):
                pass

    def wait(pending) -> None:
        while time.monotonic() < deadline and pending():
            time.sleep(0.2)

    deadline = time.monotonic() + grace_s
    leaders = [s for s in members(marker, sessions, by_marker) if s in sessions]
    send(leaders, signal.SIGTERM)
    wait(lambda: any(map(alive, leaders)))
    send(members(marker, sessions, by_marker), signal.SIGTERM)
    wait(lambda: members(marker, sessions, by_marker))
    deadline = time.monotonic() + SWEEP_S
    while (left := members(marker, sessions, by_marker)) and time.monotonic() < deadline:
        send(left, signal.SIGKILL)
        time.sleep(0.05)
    return sorted(signalled)


def start(argv: Sequence[str], grace_s: float = GRACE_S, marker: str | None = None,
          watch: bool = True, **popen) -> Tethered:
    """Start ``argv`` in its own session, tied to this process (module docstring). ``popen``
    passes to `subprocess.Popen` (``stdout``, ``env``, ``cwd``, …); the marker (a fresh one unless
    given) is added to the child's environment. ``watch=False``: no watchdog, the child outlives
    this process until someone calls :func:`reap` (or :func:`stop`)."""
    marker = marker or f"{os.getpid()}-{secrets.token_hex(8)}"
    env = dict(popen.pop("env", None) or os.environ)
    env[MARKER_VAR] = ",".join(m for m in ((env.get(MARKER_VAR) or ""), marker) if m)
    watchdog = None
    if watch:  # the watchdog first: it must be watching before the child can start anything
        watchdog = subprocess.Popen(
            [sys.executable, "-m", "soft_spatial.infra.tether", "--watch", marker,
             "--grace", str(grace_s)],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, start_new_session=True,
            env={k: v for k, v in os.environ.items() if k != MARKER_VAR})
    try:
        proc = subprocess.Popen(list(map(str, argv)), env=env, start_new_session=True,
                                close_fds=True, **popen)
    except BaseException:
        if watchdog is not None:
            watchdog.stdin.close()
            watchdog.wait()
        raise
    if watchdog is not None:
        watchdog.stdin.write(f"{proc.pid}\n".encode())
        watchdog.stdin.flush()
    return Tethered(proc, watchdog, marker, grace_s)


def stop(child: Tethered) -> int | None:
    """End ``child`` and everything it started (if still running), wait until the watchdog has
    done so (or do it here, for a child started without one), and reap the child; returns its
    exit status."""
    if child.watchdog is None:
        reap(child.marker, [child.pid], child.grace_s)
    else:
        try:
            child.watchdog.stdin.close()
        except OSError:
            pass
        child.watchdog.wait()
    try:
        return child.proc.wait(timeout=5)
    except subprocess.TimeoutExpired:  # not killable by this user: nothing more to do
        return child.proc.returncode


def run(argv: Sequence[str], grace_s: float = GRACE_S, **popen) -> subprocess.CompletedProcess:
    """``subprocess.run``'s counterpart: start ``argv`` tethered, wait for it (its output, with
    ``stdout=subprocess.PIPE`` and the like, read as ``communicate`` reads it), and `stop` it on
    the way out, however the wait ends (an interrupt included)."""
    child = start(argv, grace_s, **popen)
    try:
        out, err = child.proc.communicate()
    finally:
        stop(child)
    return subprocess.CompletedProcess(child.proc.args, child.returncode, out, err)


def log_tail(log, lines: int = 30) -> str:
    """The last ``lines`` lines of a child's log (a failure's message quotes them; "" without the
    file)."""
    if not log.is_file():
        return ""
    return "".join(log.read_text(encoding="utf-8", errors="replace").splitlines(True)[-lines:])


def _watch(marker: str, grace_s: float) -> None:
    """The watchdog: read the child's pid, wait for EOF (the parent gone or `stop`), then reap."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # outlive a Ctrl-C sent to the parent's group
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # and the terminal closing
    first = sys.stdin.buffer.readline()
    sessions = [int(first)] if first.strip() else []
    sys.stdin.buffer.read()  # returns when the write end is closed
    reap(marker, sessions, grace_s)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m soft_spatial.infra.tether",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--watch", required=True, metavar="MARKER")
    parser.add_argument("--grace", type=float, default=GRACE_S)
    args = parser.parse_args(argv)
    _watch(args.watch, args.grace)


if __name__ == "__main__":
    main()
