"""The Ray processes of one run: its directory (pids, logs, address, token), `ray start` on each
node, waiting until every node is alive, the driver command, and the teardown (by pid, then by the
run's marker variable; never `ray stop`). One function per subcommand that starts or stops something.
"""
from __future__ import annotations

import contextlib
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

from soft_spatial.infra.procs import alive as pid_alive
from soft_spatial.infra.ray_auth import token_auth
from soft_spatial.infra.procs import find_pids
from soft_spatial.launch.plan import (MARKER, LaunchError, Options, log, plan_launch, ray_start, resolve_head_ip,
                                      resolve_ports, resolve_resources, run_marker, this_host)

ROOT = Path(os.environ.get("SOFT_SPATIAL_ROOT") or Path(__file__).resolve().parents[2])
START_TIMEOUT = 300  # seconds for one `ray start` to come up (its process is watched meanwhile)


def kill_gracefully(pids: list, grace: float = 30.0) -> None:
    """TERM, wait up to ``grace`` seconds, then KILL."""
    live = [p for p in pids if pid_alive(p)]
    for pid in live:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while live and time.monotonic() < deadline:
        time.sleep(0.2)
        live = [p for p in live if pid_alive(p)]
    for pid in live:
        log(f"killing (KILL) {pid}")
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


@dataclass
class Run:
    """One run directory: where pids, logs, the address and the token live, and what was started."""

    opts: Options
    environ: dict
    run_dir: Path
    started: list = field(default_factory=list)  # [(name, Popen or pid)] in start order

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
        there is one and otherwise leaves Ray's own defaults alone (`infra.ray_auth.token_auth`)."""
        token_auth(self.environ, self.state_dir / "auth_token", create, dry_run=self.opts.dry_run)

    def start(self, name: str, argv: list) -> None:
        """Start ``argv`` in the background (own session, log in logs/ray-NAME.log); record its pid."""
        logf = self.log_dir / f"ray-{name}.log"
        if self.opts.dry_run:
            print(f"[dry-run] {shlex.join(argv)} > {shlex.quote(str(logf))} 2>&1 &", flush=True)
            self.started.append((name, None))
            return
        with open(logf, "wb") as out:
            proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True,
                                    env=self.environ)
        self.started.append((name, proc))  # before the pid file: a signal now still stops it
        (self.state_dir / f"{name}.pid").write_text(f"{proc.pid}\n")
        log(f"started {name} (pid {proc.pid}), log {logf}")

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

    def marker_pids(self) -> list:
        """Live processes on this machine that carry this run's marker."""
        pids = find_pids(environ=lambda env: env.get(MARKER) == str(self.run_dir))
        return [p for p in pids if pid_alive(p)]

    def teardown(self) -> None:
        """Stop everything started for this run: known pids in reverse start order, then any
        process that still carries the marker."""
        for name, proc in reversed(self.started):
            if self.opts.dry_run:
                print(f"[dry-run] # on exit: kill -TERM <pid of {name}>", flush=True)
                continue
            pid = proc if isinstance(proc, int) else proc.pid
            if pid_alive(pid):
                log(f"stopping {name} (pid {pid})")
                kill_gracefully([pid])
            if not isinstance(proc, int):
                proc.wait()
            (self.state_dir / f"{name}.pid").unlink(missing_ok=True)
        self.started = []
        if self.opts.dry_run:
            return
        left = self.marker_pids()
        if left:
            log(f"stopping {len(left)} leftover Ray process(es) of this run: {left}")
            kill_gracefully(left)
        (self.state_dir / "address").unlink(missing_ok=True)

    def watch(self) -> None:
        """Fail when a process this run started has ended (called while waiting)."""
        for name, proc in self.started:
            if proc is not None and not isinstance(proc, int) and proc.poll() is not None:
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
    run.start(name, argv)
    run.wait_started(name)
    if role == "head":
        address = f"{resolve_head_ip(opts, host, in_slurm)}:{opts.port}"
        if not opts.dry_run:
            (run.state_dir / "address").write_text(address + "\n")
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
    if opts.name:  # only the named process: its Ray children go with it (`ray start --block`)
        if not run.started:
            raise LaunchError(f"no pid file for {opts.name} in {run.state_dir}")
        if opts.dry_run:
            print(f"[dry-run] kill -TERM {run.started[0][1]}")
            return 0
        kill_gracefully([run.started[0][1]])
        (run.state_dir / f"{opts.name}.pid").unlink(missing_ok=True)
        return 0
    run.teardown()
    log(f"stopped Ray processes of {run.run_dir}")
    return 0


class _Stop(BaseException):
    """INT or TERM while launching (exit code 128 + signal)."""


def _on_signal(signum, frame):
    raise _Stop(128 + signum)


def cmd_launch(opts: Options, environ: dict) -> int:
    run = Run.create(opts, environ)
    run.setup_auth(create=not opts.address)
    resolve_resources(opts, environ)
    launch_log = None if opts.dry_run else open(run.log_dir / "launch.log", "ab")
    driver = None
    old = {s: signal.signal(s, _on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
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
        driver = subprocess.Popen(plan.driver, env=run.environ, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        for line in driver.stdout:  # the command's output: here and in logs/launch.log
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
    except _Stop as e:
        rc = e.args[0]
        _tee(launch_log, f"stopped by signal {rc - 128}")
        return rc
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # cleanup must not be cut short
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        if driver is not None and driver.poll() is None:
            _tee(launch_log, f"stopping the command (pid {driver.pid})")
            kill_gracefully([driver.pid])
            driver.wait()
        if run.started:
            _tee(launch_log, "tearing down the Ray cluster")
            run.teardown()
        _tee(launch_log, f"exit code {rc}; run directory {run.run_dir}")
        if launch_log:
            launch_log.close()
        for s, handler in old.items():
            signal.signal(s, handler)


def _tee(launch_log, msg: str) -> None:
    """A launcher line on stderr and in logs/launch.log."""
    log(msg)
    if launch_log:
        launch_log.write(f"[launch {time.strftime('%H:%M:%S')}] {msg}\n".encode())
        launch_log.flush()
