"""The Ray processes of one run: its directory (pids, logs, address, token), `ray start` on each
node, waiting until every node is alive, the driver command, and the teardown. Every process is
started through the tether (``infra/tether.py``) with the run's marker: ``launch`` ties them to
itself (they end with it, however it ends), ``head`` and ``worker`` leave them running in the
background until ``stop``, which ends them with the tether's reaper (each recorded process's
session and the run's marker; never `ray stop`). One function per subcommand that starts or stops
something.
"""
from __future__ import annotations

import hashlib
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from soft_spatial.infra import tether
from soft_spatial.infra.procs import alive as pid_alive
from soft_spatial.infra.procs import start_time
from soft_spatial.infra.ray_auth import UnsafeToken, token_auth
from soft_spatial.infra.signals import exit_status
from soft_spatial.launch.plan import (LaunchError, Options, log, plan_launch, ray_start, resolve_head_ip,
                                      resolve_ports, resolve_resources, this_host)

ROOT = Path(os.environ.get("SOFT_SPATIAL_ROOT") or Path(__file__).resolve().parents[2])
START_TIMEOUT = 300  # seconds for one `ray start` to come up (its process is watched meanwhile)
STOP_GRACE_S = 30.0  # from SIGTERM to SIGKILL when a run's processes are stopped


def run_marker(run_dir: Path) -> str:
    """The tether marker every process started for the run in ``run_dir`` carries (its Ray
    processes on this machine, the command it runs): one per run directory."""
    return "launch-" + hashlib.sha256(str(run_dir).encode()).hexdigest()[:16]


@dataclass
class Run:
    """One run directory: where pids, logs, the address and the token live, and what was started."""

    opts: Options
    environ: dict
    run_dir: Path
    started: list = field(default_factory=list)  # [(name, Tethered or pid)] in start order

    @classmethod
    def create(cls, opts: Options, environ: dict) -> Run:
        run_dir = opts.run_dir
        if not run_dir:
            if environ.get("SLURM_JOB_ID"):
                run_dir = ROOT / "runs" / environ["SLURM_JOB_ID"]
            elif opts.subcommand == "launch":
                run_dir = ROOT / "runs" / datetime.now().strftime("%Y%m%d-%H%M%S")
            else:
                run_dir = ROOT / "runs" / "local"
        run = cls(opts, environ, Path(os.path.abspath(run_dir)))
        if not opts.dry_run:
            run.state_dir.mkdir(parents=True, exist_ok=True)
            run.log_dir.mkdir(parents=True, exist_ok=True)
        return run

    state_dir = property(lambda self: self.run_dir / "ray")
    log_dir = property(lambda self: self.run_dir / "logs")
    marker = property(lambda self: run_marker(self.run_dir))

    def setup_auth(self, create: bool) -> None:
        """Ray token authentication, explicit so that every node and the driver agree: ``create``
        writes a fresh token for a cluster this run starts; joining uses this run's token when
        there is one and otherwise leaves Ray's own defaults alone (`infra.ray_auth.token_auth`).
        A token file that is not this user's own with mode 0600 is refused in one line."""
        try:
            token_auth(self.environ, self.state_dir / "auth_token", create, dry_run=self.opts.dry_run)
        except UnsafeToken as e:
            raise LaunchError(str(e)) from None

    def start(self, name: str, argv: list) -> None:
        """Start ``argv`` in the background (tethered with the run's marker; its own session, log in
        logs/ray-NAME.log); record its pid. Under ``launch`` it ends with this process."""
        logf = self.log_dir / f"ray-{name}.log"
        if self.opts.dry_run:
            print(f"[dry-run] {shlex.join(argv)} > {shlex.quote(str(logf))} 2>&1 &", flush=True)
            self.started.append((name, None))
            return
        # the run's marker (what `stop` and the teardown's last sweep find) and, for the tether,
        # one of this node's own: its watchdog (and `tether.stop`) then ends this node alone. Under
        # the run's marker the first node stopped took every node's processes with it, SIGTERM to
        # all at once: a `ray start` whose GCS went first waits out Ray's 30 s drain (and the
        # launcher the grace period) before anything is killed.
        env = dict(self.environ)
        env[tether.MARKER_VAR] = ",".join(m for m in (env.get(tether.MARKER_VAR), self.marker) if m)
        with open(logf, "wb") as out:
            child = tether.start(argv, STOP_GRACE_S, marker=f"{self.marker}-{name}",
                                 watch=self.opts.subcommand == "launch", stdout=out,
                                 stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
        self.started.append((name, child))  # before the pid file: a signal now still stops it
        (self.state_dir / f"{name}.pid").write_text(f"{child.pid}\n")
        log(f"started {name} (pid {child.pid}), log {logf}")

    def wait_started(self, name: str) -> None:
        """Wait for "Ray runtime started" in the log of ``name``; fail when its process ends."""
        logf = self.log_dir / f"ray-{name}.log"
        if self.opts.dry_run:
            print(f'[dry-run] # wait for "Ray runtime started" in {logf}', flush=True)
            return
        proc = dict(self.started)[name]
        deadline = time.monotonic() + max(START_TIMEOUT, self.opts.timeout)
        while b"Ray runtime started" not in logf.read_bytes():
            if proc.poll() is not None:
                tail = logf.read_text(errors="replace").splitlines()[-30:]
                print("\n".join(tail), file=sys.stderr)
                raise LaunchError(f"{name} exited before Ray started (log: {logf})")
            if time.monotonic() > deadline:
                raise LaunchError(f"{name}: Ray did not start in time (log: {logf})")
            time.sleep(0.5)
        log(f"{name} is up")

    def stop_one(self, name: str, pid: int) -> None:
        """End the process ``name`` (``pid``) and what it started in its session (``ray start``'s
        Ray processes stay there), not the run's other processes; remove its pid file."""
        tether.reap(self.marker, [pid], STOP_GRACE_S, by_marker=False)
        (self.state_dir / f"{name}.pid").unlink(missing_ok=True)

    def teardown(self) -> None:
        """Stop everything started for this run: each process in reverse start order (a tethered
        one with its tether, a recorded pid's session with the reaper; one node at a time, so that
        a worker's `ray start` drains while its GCS lives), then (the tether's reaper) every
        process left in a recorded process's session or carrying the run's marker."""
        if self.opts.dry_run:
            for name, _ in reversed(self.started):
                print(f"[dry-run] # on exit: kill -TERM <pid of {name}>", flush=True)
            self.started = []
            return
        for name, child in reversed(self.started):
            if isinstance(child, tether.Tethered):
                if child.poll() is None:
                    log(f"stopping {name} (pid {child.pid})")
                tether.stop(child)
            elif isinstance(child, int) and tether.members(self.marker, [child], by_marker=False):
                log(f"stopping {name} (pid {child})")
                tether.reap(self.marker, [child], STOP_GRACE_S, by_marker=False)
        sessions = [c if isinstance(c, int) else c.pid for _, c in self.started]
        left = tether.members(self.marker, sessions)
        if left:
            log(f"stopping {len(left)} Ray process(es) of this run: {left}")
            tether.reap(self.marker, sessions, STOP_GRACE_S)
        for name, _ in self.started:
            (self.state_dir / f"{name}.pid").unlink(missing_ok=True)
        self.started = []
        (self.state_dir / "address").unlink(missing_ok=True)

    def watch(self) -> None:
        """Fail when a process this run started has ended (called while waiting)."""
        for name, proc in self.started:
            if isinstance(proc, tether.Tethered) and proc.poll() is not None:
                raise LaunchError(f"{name} (pid {proc.pid}) exited while waiting for the cluster; "
                                  f"see {self.log_dir / f'ray-{name}.log'}")


# --- waiting for nodes --------------------------------------------------------------------------------
def missing_nodes(expected: list, alive_hosts: list) -> list:
    """The ``expected`` node names with no alive host of the same short name."""
    short = {h.split(".")[0] for h in alive_hosts}
    return [n for n in expected if n.split(".")[0] not in short]


def wait_nodes(run: Run, address: str, want: int, expected: list = ()) -> None:
    """Wait until the cluster at ``address`` reports ``want`` alive nodes; on timeout the error
    names the alive ones and the ``expected`` nodes that are missing."""
    timeout = run.opts.timeout
    if run.opts.dry_run:
        print(f"[dry-run] # wait until {address} reports {want} alive Ray node(s) "
              f"(timeout {timeout:.0f}s){': ' + ' '.join(expected) if expected else ''}", flush=True)
        return
    deadline = time.monotonic() + timeout
    host, port = address.rsplit(":", 1)
    while True:
        run.watch()
        try:
            socket.create_connection((host, int(port)), timeout=2).close()
            break
        except OSError:
            if time.monotonic() > deadline:
                raise LaunchError(f"no Ray GCS at {address} after {timeout:.0f}s") from None
            time.sleep(1)
    import logging

    import ray

    ray.init(address=address, logging_level=logging.ERROR, log_to_driver=False)
    try:
        last = -1
        while True:
            alive = [n for n in ray.nodes() if n.get("Alive")]
            if len(alive) >= want:
                log(f"{len(alive)}/{want} Ray nodes alive at {address}")
                return
            if len(alive) != last:
                log(f"{len(alive)}/{want} Ray nodes alive at {address}, waiting")
                last = len(alive)
            if time.monotonic() > deadline:
                hosts = [n.get("NodeManagerHostname") or "" for n in alive]
                msg = (f"timed out after {timeout:.0f}s: {len(alive)}/{want} Ray nodes alive at "
                       f"{address}; alive: {sorted(hosts) or None}")
                missing = missing_nodes(list(expected), hosts)
                if missing:
                    msg += f"; missing nodes: {' '.join(missing)}"
                raise LaunchError(msg)
            run.watch()
            time.sleep(1)
    finally:
        ray.shutdown()


# --- subcommands --------------------------------------------------------------------------------------
def cmd_node(opts: Options, environ: dict) -> int:
    """``head`` / ``worker``: start Ray on this machine (background, or exec with --foreground)."""
    role = opts.subcommand
    run = Run.create(opts, environ)
    run.setup_auth(create=role == "head")
    resolve_resources(opts, environ)
    address = opts.address
    if role == "worker" and not address:
        saved = run.state_dir / "address"
        if not saved.is_file():
            raise LaunchError("worker needs --address (or a head started with this RUN_DIR)")
        address = saved.read_text().strip()
    in_slurm = bool(environ.get("SLURM_JOB_ID"))
    resolve_ports(opts, role, in_slurm)
    argv = ray_start(opts, run.environ, run.run_dir, role, opts.resources, address)
    if opts.foreground:
        if opts.dry_run:
            print(f"[dry-run] {shlex.join(argv)}")
            return 0
        os.execvpe(argv[0], argv, run.environ)
    host = this_host()
    name = opts.name or f"{role}-{host}"
    if not opts.name and role == "worker":
        i = 1
        while _running(run, f"{name}-{i}"):
            i += 1
        name = f"{name}-{i}"
    if _running(run, name):
        raise LaunchError(f"{name} is already running; use stop first")
    try:
        run.start(name, argv)
        run.wait_started(name)
        if role == "head":
            address = f"{resolve_head_ip(opts, host, in_slurm)}:{opts.port}"
            if not opts.dry_run:
                (run.state_dir / "address").write_text(address + "\n")
    except BaseException:  # a start that failed or was interrupted leaves nothing of it running
        for started, child in run.started:
            if isinstance(child, tether.Tethered):
                run.stop_one(started, child.pid)
                child.wait()
        raise
    print(f"RAY_ADDRESS={address}\nRUN_DIR={run.run_dir}", flush=True)
    return 0


def _running(run: Run, name: str) -> bool:
    pid_file = run.state_dir / f"{name}.pid"
    return pid_file.is_file() and pid_alive(int(pid_file.read_text()))


def cmd_wait(opts: Options, environ: dict) -> int:
    run = Run.create(opts, environ)
    run.setup_auth(create=False)
    saved = run.state_dir / "address"
    address = opts.address or (saved.read_text().strip() if saved.is_file() else None)
    if not address:
        raise LaunchError("wait needs --address")
    wait_nodes(run, address, opts.nodes or 1)
    return 0


def cmd_stop(opts: Options, environ: dict) -> int:
    run = Run.create(opts, environ)
    for pid_file in sorted(run.state_dir.glob("*.pid")):
        if not opts.name or pid_file.stem == opts.name:
            run.started.append((pid_file.stem, int(pid_file.read_text())))
    # in start order (the head first), as teardown expects; a process gone sorts first
    run.started.sort(key=lambda started: float(start_time(started[1]) or 0))
    if opts.name:  # only the named process: its Ray children go with it (`ray start --block`)
        if not run.started:
            raise LaunchError(f"no pid file for {opts.name} in {run.state_dir}")
        if opts.dry_run:
            print(f"[dry-run] kill -TERM {run.started[0][1]}")
            return 0
        run.stop_one(opts.name, run.started[0][1])
        return 0
    run.teardown()
    log(f"stopped Ray processes of {run.run_dir}")
    return 0


def cmd_launch(opts: Options, environ: dict) -> int:
    """``launch``: Ray on every node, the command on the head, everything stopped on the way out
    (an interrupt, SIGTERM or SIGHUP included: logged, then raised on to the command's handler)."""
    run = Run.create(opts, environ)
    run.setup_auth(create=not opts.address)
    resolve_resources(opts, environ)
    launch_log = None if opts.dry_run else open(run.log_dir / "launch.log", "ab")
    driver = None
    rc = 1
    try:
        plan = plan_launch(opts, run.environ, run.run_dir)
        _tee(launch_log, f"mode={plan.mode} nodes={plan.nnodes} cpus/node={opts.num_cpus} "
                         f"gpus/node={opts.num_gpus} run_dir={run.run_dir}")
        for i, (name, argv) in enumerate(plan.starts):
            run.start(name, argv)
            if i == 0:
                run.wait_started(name)
        if plan.starts and not opts.dry_run:
            (run.state_dir / "address").write_text(plan.address + "\n")
        wait_nodes(run, plan.address, plan.nnodes, plan.expected)
        run.environ.update(RAY_ADDRESS=plan.address, RUN_DIR=str(run.run_dir))
        if opts.dry_run:
            print(f"[dry-run] {shlex.join(['env', 'RAY_ADDRESS=' + plan.address, *plan.driver])}")
            rc = 0
            return rc
        (run.run_dir / "launch.txt").write_text(
            f"date={datetime.now().isoformat(timespec='seconds')}\n"
            f"mode={plan.mode} nnodes={plan.nnodes} gpus_per_node={opts.trainer_gpus} "
            f"cpus_per_node={opts.num_cpus}\nray_address={plan.address}\n"
            f"command={shlex.join(plan.driver)}\n")
        _tee(launch_log, f"running: {shlex.join(plan.driver)}")
        driver = tether.start(plan.driver, STOP_GRACE_S, env=run.environ, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        for line in driver.proc.stdout:  # the command's output: here and in logs/launch.log
            sys.stdout.buffer.write(line)
            sys.stdout.flush()
            launch_log.write(line)
            launch_log.flush()
        rc = driver.wait()
        _tee(launch_log, f"command exited with {rc}")
        return rc
    except LaunchError as e:
        _tee(launch_log, f"error: {e}")
        return 1
    except KeyboardInterrupt as e:  # SIGINT, SIGTERM, SIGHUP (infra.signals.command)
        rc = exit_status(e)
        _tee(launch_log, f"stopped by signal {rc - 128}")
        raise
    finally:
        held = {s: signal.signal(s, signal.SIG_IGN)  # cleanup must not be cut short
                for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
        if driver is not None:
            if driver.poll() is None:
                _tee(launch_log, f"stopping the command (pid {driver.pid})")
            tether.stop(driver)
            driver.proc.stdout.close()
        if run.started:
            _tee(launch_log, "tearing down the Ray cluster")
            run.teardown()
        _tee(launch_log, f"exit code {rc}; run directory {run.run_dir}")
        if launch_log:
            launch_log.close()
        for s, handler in held.items():
            signal.signal(s, handler)


def _tee(launch_log, msg: str) -> None:
    """A launcher line on stderr and in logs/launch.log."""
    log(msg)
    if launch_log:
        launch_log.write(f"[launch {time.strftime('%H:%M:%S')}] {msg}\n".encode())
        launch_log.flush()
