"""A training run's local Ray: started as a tethered child (``infra/tether.py``), so that its
processes never outlive the run, and kept in a directory of the run's own.

When the entry point starts Ray itself (no cluster address), the run gets its own Ray temporary
directory, ``/tmp/ssray-<uid>/<driver pid>-<driver start time>`` (through ``RAY_TMPDIR``). Both
directories are the user's alone (`private_dir`: mode 0700; one that another user owns, or that
others may write, is refused: they could swap the session's files, its token among them). The
run's token lives there too (``infra/ray_auth.py``).

`start_local` starts Ray's head in a child process of its own (``python -m
soft_spatial.infra.ray_session --head DIR``: ``ray.init`` with the run's node settings, then it
waits), tethered to the driver, and returns its address once Ray is up (or at once, the driver
going on with its own imports meanwhile: `LocalRay.wait_up`); the driver joins it as a client
(``ray.init(address=...)``) and `LocalRay.stop` ends it. Every Ray process of the run (GCS,
raylet, dashboard and runtime-env agents, log monitor, workers) is then in that child's session
and carries its marker, so the tether's one reaper ends exactly them: after the run, when the
driver is ended by a signal, and (the watchdog) when it is SIGKILLed. A process is never ended for
naming the directory or holding a file in it: a user's ``tail -f`` on a Ray log lives on. The
tether's marker and the child's pid are kept in the directory (``tether.json``) for
`reap_orphans`, called at the start of every run: it ends the Ray of every directory whose driver
is gone (its watchdog was killed too, the machine rebooted) and removes the directory.

``python -m soft_spatial.infra.ray_session --reap`` runs `reap_orphans` by hand.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from soft_spatial.infra import tether
from soft_spatial.infra.atomic import write_text
from soft_spatial.infra.procs import start_time

__all__ = ["runs_root", "run_ray_dir", "private_dir", "UnsafeDirectory", "NODE_KEYS", "LocalRay",
           "start_local", "session_pids", "reap_orphans"]

RAY_TMPDIR = "RAY_TMPDIR"  # Ray's temporary directory: set to the run's before Ray starts
RECORD, ADDRESS, HEAD_LOG = "tether.json", "address", "head.log"  # in the run's Ray directory
#: ``ray.init`` arguments that start a node (the head takes them; a client joining may not)
NODE_KEYS = ("num_cpus", "num_gpus", "resources", "labels", "object_store_memory",
             "include_dashboard", "dashboard_host", "dashboard_port", "_system_config",
             "_enable_object_reconstruction", "_memory", "_plasma_directory", "_node_ip_address")
#: ``ray.init`` arguments of a client's own (its job), not the head's
CLIENT_KEYS = ("runtime_env", "job_config", "namespace", "log_to_driver", "address")
START_LIMIT_S = 900.0  # bounds a head that never comes up nor exits (Ray's own timeouts are shorter)


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


@dataclass
class LocalRay:
    """A run's local Ray: its directory, the tethered head process and its address."""

    path: Path
    head: tether.Tethered
    address: str = ""

    def stop(self) -> None:
        """Leave this Ray (a client whose cluster goes first ends abruptly), end every process of
        it (the tether's reaper) and remove its directory."""
        try:
            ray = sys.modules.get("ray")
            if ray is not None and ray.is_initialized():
                ray.shutdown()
        finally:
            try:
                tether.stop(self.head)
            finally:
                shutil.rmtree(self.path, ignore_errors=True)

    def wait_up(self) -> str:
        """Wait until the head is up and return its address (set in ``address``). A head that exits
        first raises ``RuntimeError`` with the end of its log (the caller `stop`s it)."""
        deadline = time.monotonic() + START_LIMIT_S
        while not (self.path / ADDRESS).is_file():
            if self.head.poll() is not None or time.monotonic() > deadline:
                tail = (self.path / HEAD_LOG).read_text(errors="replace")[-3000:]
                raise RuntimeError(f"the run's local Ray did not start (exit {self.head.poll()}); the "
                                   f"end of its log {self.path / HEAD_LOG}:\n{tail}")
            time.sleep(0.1)
        self.address = (self.path / ADDRESS).read_text().strip()
        return self.address


def start_local(path: Path, init: dict, env: dict | None = None, wait: bool = True) -> LocalRay:
    """Start the run's Ray head in ``path`` (`run_ray_dir`), with the ``ray.init`` node settings of
    ``init`` (its :data:`CLIENT_KEYS` are left to the driver), tethered to this process, and return
    it once it is up (its ``address`` set); with ``wait=False`` at once, the caller then calls
    `LocalRay.wait_up` (the head's seconds of start-up overlap the caller's own work). The
    environment (``env``, default this process's) is every Ray process's: ``RAY_TMPDIR`` is set to
    ``path``. A head that exits first raises ``RuntimeError`` with the end of its log; nothing of
    it is left then."""
    env = dict(os.environ if env is None else env, **{RAY_TMPDIR: str(path)})
    settings = {k: v for k, v in init.items() if k not in CLIENT_KEYS}
    with open(path / HEAD_LOG, "ab") as log:
        head = tether.start([sys.executable, "-m", "soft_spatial.infra.ray_session", "--head",
                             str(path), json.dumps(settings)],
                            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
    local = LocalRay(path, head)
    try:
        write_text(path / RECORD, json.dumps({"marker": head.marker, "pid": head.pid}))
        if wait:
            local.wait_up()
    except BaseException:
        local.stop()
        raise
    return local


def _record(path: Path) -> dict | None:
    try:
        record = json.loads((path / RECORD).read_text())
        return {"marker": str(record["marker"]), "pid": int(record["pid"])}
    except (OSError, ValueError, KeyError, TypeError):
        return None


def session_pids(path: Path) -> list[int]:
    """The live processes of the local Ray in the run directory ``path`` (the tether's members:
    its head's session and marker, as recorded there); empty when it has no record."""
    record = _record(path)
    return tether.members(record["marker"], [record["pid"]]) if record else []


def reap_orphans(root: Path | None = None) -> list[int]:
    """End the local Ray of every run directory under ``root`` whose driver is gone (the tether's
    reaper, by the marker and session recorded there: never a process that only names the
    directory or holds a file in it) and remove the directory; returns the pids signalled."""
    root = runs_root() if root is None else root
    killed: list[int] = []
    if not root.is_dir():
        return killed
    for path in sorted(root.iterdir()):
        if path.is_dir() and not _driver_alive(path):
            record = _record(path)
            if record:
                killed += tether.reap(record["marker"], [record["pid"]])
            shutil.rmtree(path, ignore_errors=True)
    return killed


def _head(path: Path, settings: dict) -> None:
    """The head process: Ray's node started here (its processes are this session's), the address
    written for the driver, then wait until ended (SIGTERM: Ray's handler exits and its exit hook
    ends the node's processes; the tether's reaper ends what is left)."""
    import ray

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # ended by the tether, never by a Ctrl-C
    # this process's ray.init is the node's first driver, for which Ray prestarts default workers;
    # no task of the run can use them (the run's job has a runtime env of its own): two Python
    # processes (1.6 s of CPU) started beside the run's first actor for nothing
    system = dict(settings.get("_system_config") or {})
    system.setdefault("prestart_worker_first_driver", False)
    ray.init(**{**settings, "_system_config": system})
    write_text(path / ADDRESS, ray.get_runtime_context().gcs_address + "\n")
    while True:
        signal.pause()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m soft_spatial.infra.ray_session",
                                     description=__doc__.splitlines()[0])
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--head", nargs=2, metavar=("DIR", "SETTINGS"),
                       help="start the run's Ray head in DIR with the ray.init SETTINGS (JSON)")
    group.add_argument("--reap", action="store_true", help="end the Ray of the runs whose driver is gone")
    args = parser.parse_args(argv)
    if args.reap:
        print(f"ended {len(reap_orphans())} leftover Ray process(es)")
        return
    _head(Path(args.head[0]), json.loads(args.head[1]))


if __name__ == "__main__":
    main()
