"""Ray cluster start-up for soft_spatial, inside or outside Slurm (docs/launch.md).

    python -m soft_spatial.launch [options] launch -- python -m soft_spatial.train experiment=adaptsoft ...
    python -m soft_spatial.launch [options] head|worker|wait|stop|nodes

Subcommands
  launch -- CMD...  Driver mode (what slurm/*.sbatch run). Starts a Ray head on the first node and a
                    worker on every other node (`srun --nodes=1 --ntasks=1 -w NODE` under Slurm), waits
                    until the cluster reports every node, runs CMD on the head with
                    trainer.nnodes=N trainer.n_gpus_per_node=G trainer.default_local_dir=RUN_DIR/checkpoints
                    and the forwarded environment (++ray_kwargs.ray_init.runtime_env.env_vars.X=...)
                    appended (a key already given in CMD is left as given), tears Ray down on exit, INT
                    or TERM and exits with CMD's exit code.
                    Outside Slurm: --local-nodes K starts K raylets on this machine (head + K-1 workers,
                    custom resource local_node_<i> on each); --address A runs CMD against a running
                    cluster (nothing is started or stopped).
  head              Start a Ray head on this machine (in the background; --foreground to block).
  worker            Start a Ray worker on this machine joining --address (default: the address the
                    last `head` of this RUN_DIR wrote).
  wait              Wait until --address reports --nodes alive nodes (or --timeout, then name the
                    missing ones and fail).
  stop              Stop the Ray processes that head/worker/launch started for this RUN_DIR (by pid,
                    then any process that still carries this run's marker variable). Never `ray stop`.
  nodes             Print the node list this launcher would use (count=N, then node[i]=NAME lines).

Options, with their environment equivalents in brackets, are listed below. Other environment:
  SOFT_SPATIAL_NODELIST="n1 n2"  node list override (else `scontrol show hostnames $SLURM_JOB_NODELIST`)
  SOFT_SPATIAL_HEAD_NODE         head node (default: the first node)
  SOFT_SPATIAL_FORWARD_ENV       extra variable names to forward (soft_spatial/infra/ray_env.py has the list)
  SOFT_SPATIAL_SRUN_ARGS         extra srun arguments for the Ray steps (e.g. "--gres=gpu:4")
  SOFT_SPATIAL_RAY_BIN           the ray CLI (default: the one beside this interpreter, else on PATH)
  RAY_AUTH_MODE                  unset: token authentication with a fresh token in RUN_DIR/ray/auth_token
                                 (RUN_DIR must be on a filesystem every node sees); `disabled` opts out;
                                 RAY_AUTH_TOKEN / RAY_AUTH_TOKEN_PATH, when set, are used as they are.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from soft_spatial.infra.procs import alive as pid_alive
from soft_spatial.infra.procs import find_pids
from soft_spatial.infra.ray_env import forwarded_env

ROOT = Path(os.environ.get("SOFT_SPATIAL_ROOT") or Path(__file__).resolve().parents[1])
SUBCOMMANDS = ("launch", "head", "worker", "wait", "stop", "nodes")
FORWARD_PREFIX = "++ray_kwargs.ray_init.runtime_env.env_vars."
MARKER = "SOFT_SPATIAL_RAY_RUN"  # every Ray process started for a run carries MARKER=RUN_DIR
DEFAULT_PORTS = {"port": 6379, "client_port": 10001, "dashboard_port": 8265}
DEFAULT_AGENT_PORT = 52365  # Ray's fixed dashboard-agent port
START_TIMEOUT = 300  # seconds for one `ray start` to come up (its process is watched meanwhile)


class LaunchError(RuntimeError):
    """A problem the user can fix; printed as one line, exit code 1."""


def log(msg: str) -> None:
    print(f"[launch {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# --- options ------------------------------------------------------------------------------------------
# (flag, destination, environment variable, help)
VALUE_OPTIONS = [
    ("--run-dir", "run_dir", "RUN_DIR", "default: runs/<SLURM_JOB_ID> under Slurm, runs/<timestamp> "
     "for launch, runs/local for head/worker/wait/stop (under the checkout)"),
    ("--address", "address", "SOFT_SPATIAL_RAY_ADDRESS", "HOST:PORT of a running head"),
    ("--port", "port", "SOFT_SPATIAL_RAY_PORT", "head GCS port (6379; outside Slurm a taken default "
     "becomes a free port)"),
    ("--dashboard-port", "dashboard_port", "SOFT_SPATIAL_DASHBOARD_PORT", "8265"),
    ("--client-port", "client_port", "SOFT_SPATIAL_RAY_CLIENT_PORT", "10001"),
    ("--agent-port", "agent_port", "SOFT_SPATIAL_AGENT_PORT", "dashboard-agent HTTP port; Ray's "
     "52365 is fixed, so outside Slurm a worker takes a free port, and so does a head when 52365 is taken"),
    ("--num-cpus", "num_cpus", "SOFT_SPATIAL_NUM_CPUS", "default SLURM_CPUS_PER_TASK, "
     "SLURM_CPUS_ON_NODE, the CPUs of this machine"),
    ("--num-gpus", "num_gpus", "SOFT_SPATIAL_NUM_GPUS", "default SLURM_GPUS_PER_NODE, "
     "SLURM_GPUS_ON_NODE, CUDA_VISIBLE_DEVICES, nvidia-smi -L, 0"),
    ("--trainer-gpus-per-node", "trainer_gpus", "SOFT_SPATIAL_TRAINER_GPUS_PER_NODE",
     "default: --num-gpus"),
    ("--resources", "resources", "SOFT_SPATIAL_RAY_RESOURCES", "extra custom resources (JSON)"),
    ("--object-store-memory", "object_store", "SOFT_SPATIAL_OBJECT_STORE_MEMORY", "bytes"),
    ("--temp-dir", "temp_dir", "SOFT_SPATIAL_RAY_TMPDIR", "Ray's --temp-dir (keep it short: sockets)"),
    ("--node-ip", "node_ip", "SOFT_SPATIAL_NODE_IP", "--node-ip-address for a worker"),
    ("--head-ip", "head_ip", "SOFT_SPATIAL_HEAD_IP", "the head's IP (skips resolving it)"),
    ("--nodes", "nodes", None, "wait / launch --address: number of nodes to wait for (1)"),
    ("--local-nodes", "local_nodes", "SOFT_SPATIAL_LOCAL_NODES", "launch outside Slurm: raylets "
     "on this machine (1)"),
    ("--timeout", "timeout", "SOFT_SPATIAL_WAIT_TIMEOUT", "seconds to wait for the nodes (300)"),
    ("--name", "name", None, "head/worker/stop: process name (pid and log file)"),
]
INT_OPTIONS = {"port", "dashboard_port", "client_port", "agent_port", "num_cpus", "num_gpus",
               "trainer_gpus", "object_store", "nodes", "local_nodes"}


@dataclass
class Options:
    subcommand: str
    cmd: list = field(default_factory=list)
    dry_run: bool = False
    foreground: bool = False
    dashboard: bool = True
    trainer_args: bool = True
    run_dir: str | None = None
    address: str | None = None
    port: int | None = None
    dashboard_port: int | None = None
    client_port: int | None = None
    agent_port: int | None = None
    num_cpus: int | None = None
    num_gpus: int | None = None
    trainer_gpus: int | None = None
    resources: str | None = None
    object_store: int | None = None
    temp_dir: str | None = None
    node_ip: str | None = None
    head_ip: str | None = None
    nodes: int | None = None
    local_nodes: int = 1
    timeout: float = 300.0
    name: str | None = None


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m soft_spatial.launch", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("subcommand", choices=SUBCOMMANDS)
    p.add_argument("--dry-run", action="store_true", help="[DRY_RUN=1] print every command, run none")
    p.add_argument("--foreground", action="store_true", help="head/worker: exec `ray start --block`")
    p.add_argument("--no-dashboard", action="store_true", help="[SOFT_SPATIAL_RAY_DASHBOARD=0]")
    p.add_argument("--no-trainer-args", action="store_true",
                   help="launch: append no Hydra overrides (a non-Hydra command)")
    for flag, dest, env, text in VALUE_OPTIONS:
        p.add_argument(flag, dest=dest, metavar=dest.upper(), help=f"[{env}] {text}" if env else text)
    return p


def parse_args(argv: list, environ=os.environ) -> Options:
    """Options from ``argv`` (``... -- CMD``), an option's environment variable as its default."""
    argv = list(argv)
    cmd = []
    if "--" in argv:
        i = argv.index("--")
        argv, cmd = argv[:i], argv[i + 1:]
    ns = _parser().parse_args(argv)
    opts = Options(subcommand=ns.subcommand, cmd=cmd)
    opts.dry_run = ns.dry_run or environ.get("DRY_RUN", "0").lower() in ("1", "true")
    opts.foreground = ns.foreground
    opts.dashboard = not ns.no_dashboard and environ.get("SOFT_SPATIAL_RAY_DASHBOARD", "1") != "0"
    opts.trainer_args = not ns.no_trainer_args
    for flag, dest, env, _ in VALUE_OPTIONS:
        value = getattr(ns, dest)
        if value is None and env:
            value = environ.get(env) or None
        if value is None:
            continue
        try:
            value = int(value) if dest in INT_OPTIONS else float(value) if dest == "timeout" else value
        except ValueError:
            raise LaunchError(f"{flag} must be a number, got {value!r}") from None
        setattr(opts, dest, value)
    if opts.local_nodes < 1:
        raise LaunchError("--local-nodes must be >= 1")
    if opts.subcommand == "launch" and not cmd:
        raise LaunchError("launch needs a command after --")
    return opts


# --- nodes and resources ------------------------------------------------------------------------------
def this_host() -> str:
    return socket.gethostname().split(".")[0]


def node_list(environ=os.environ, run=subprocess.run) -> list:
    """The allocation's nodes: ``$SOFT_SPATIAL_NODELIST`` (space or comma separated), else
    ``scontrol show hostnames $SLURM_JOB_NODELIST``, else this host; checked against SLURM_NNODES."""
    override = environ.get("SOFT_SPATIAL_NODELIST")
    if override:
        nodes = override.replace(",", " ").split()
    elif environ.get("SLURM_JOB_NODELIST"):
        if shutil.which("scontrol", path=environ.get("PATH")) is None:
            raise LaunchError("SLURM_JOB_NODELIST is set but scontrol is not on PATH "
                              '(set SOFT_SPATIAL_NODELIST="n1 n2")')
        res = run(["scontrol", "show", "hostnames", environ["SLURM_JOB_NODELIST"]],
                  capture_output=True, text=True, env=dict(environ))
        if res.returncode != 0:
            raise LaunchError(f"scontrol show hostnames failed: {res.stderr.strip()}")
        nodes = res.stdout.split()
    else:
        nodes = [this_host()]
    if not nodes:
        raise LaunchError("empty node list")
    want = environ.get("SLURM_NNODES")
    if want and not override and len(nodes) != int(want):
        raise LaunchError(f"node list has {len(nodes)} entries but SLURM_NNODES={want}: "
                          f"{' '.join(nodes)}")
    return nodes


def gpu_count_from_spec(spec: str) -> int | None:
    """Sum of the counts in a Slurm GPU spec ("4", "h100:4", "gpu:h100:4", "a100:2,h100:2")."""
    total = 0
    for item in spec.split(","):
        n = item.split("(", 1)[0].rsplit(":", 1)[-1]
        if not n.isdigit():
            return None
        total += int(n)
    return total


def resolve_resources(opts: Options, environ=os.environ) -> None:
    """Fill ``num_cpus``, ``num_gpus`` and ``trainer_gpus`` from Slurm or this machine."""
    if opts.num_cpus is None:
        slurm = environ.get("SLURM_CPUS_PER_TASK") or environ.get("SLURM_CPUS_ON_NODE")
        opts.num_cpus = int(slurm) if slurm else len(os.sched_getaffinity(0))
    if opts.num_gpus is None:
        for spec in (environ.get("SLURM_GPUS_PER_NODE"), environ.get("SLURM_GPUS_ON_NODE")):
            if spec and (count := gpu_count_from_spec(spec)) is not None:
                opts.num_gpus = count
                break
    if opts.num_gpus is None and environ.get("CUDA_VISIBLE_DEVICES"):
        opts.num_gpus = len(environ["CUDA_VISIBLE_DEVICES"].split(","))
    if opts.num_gpus is None and not opts.dry_run and shutil.which("nvidia-smi"):
        res = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True)
        opts.num_gpus = sum(line.startswith("GPU") for line in res.stdout.splitlines())
    opts.num_gpus = opts.num_gpus or 0
    if opts.trainer_gpus is None:
        opts.trainer_gpus = opts.num_gpus


def free_port(preferred: int) -> int:
    """``preferred`` when it can be bound on this machine, else a free port (0: any free port)."""
    for port in (preferred, 0):
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # TIME_WAIT is no conflict
            try:
                s.bind(("", port))
                return s.getsockname()[1]
            except OSError:
                continue
    raise LaunchError("no free port on this machine")


def resolve_ports(opts: Options, role: str, in_slurm: bool) -> None:
    """Port defaults for a head or a worker on this machine: outside Slurm (real runs) a taken
    default becomes a free port; a second raylet on one machine needs its own agent port."""
    probe = not (in_slurm or opts.dry_run)
    if role == "head":
        for key, default in DEFAULT_PORTS.items():
            if getattr(opts, key) is None:
                setattr(opts, key, free_port(default) if probe else default)
    if opts.agent_port is None and probe:
        port = free_port(DEFAULT_AGENT_PORT if role == "head" else 0)
        opts.agent_port = None if port == DEFAULT_AGENT_PORT else port


def merge_resources(resources: str | None, extra: dict) -> str | None:
    """``--resources`` JSON with ``extra`` entries added."""
    try:
        merged = {**json.loads(resources or "{}"), **extra}
    except json.JSONDecodeError as e:
        raise LaunchError(f"--resources is not JSON ({e}): {resources}") from None
    return json.dumps(merged) if merged else None


# --- Hydra overrides ----------------------------------------------------------------------------------
def hydra_quote(value: str) -> str:
    """``value`` as a quoted Hydra override value that reads back as the same string: in Hydra's
    quoted strings a backslash escapes only a quote or the backslashes before one (or before the
    closing quote); ``${`` is escaped so that OmegaConf does not take it for an interpolation."""
    out = []
    for run, char in re.findall(r"(\\*)(\$\{|'|\Z|[^\\])", value):
        if char == "'":
            out.append(run * 2 + "\\'")
        elif char == "${":
            out.append(run + "\\${")
        elif char == "":
            out.append(run * 2)
        else:
            out.append(run + char)
    return "'" + "".join(out) + "'"


def hydra_value(value: str) -> str:
    """``value`` as it is when Hydra reads the plain token as this string, else quoted."""
    return value if re.fullmatch(r"[A-Za-z_./-][A-Za-z0-9_./-]*", value) else hydra_quote(value)


def user_sets(cmd: list, key: str) -> bool:
    """Whether ``cmd`` already overrides ``key`` (``key=``, ``+key=``, ``++key=``, ``~key``)."""
    return any(a.lstrip("+").startswith(key + "=") or a.startswith("~" + key) for a in cmd)


def trainer_overrides(cmd: list, nnodes: int, gpus_per_node: int, run_dir: Path,
                      env: dict) -> list:
    """The overrides launch appends to a training command, except keys ``cmd`` sets already."""
    add = [f"trainer.nnodes={nnodes}", f"trainer.n_gpus_per_node={gpus_per_node}",
           f"trainer.default_local_dir={hydra_value(str(run_dir / 'checkpoints'))}"]
    # always quoted: Ray wants strings, and Hydra would read 1 or true as a number or a bool
    add += [f"{FORWARD_PREFIX}{k}={hydra_quote(v)}" for k, v in env.items()]
    return [ov for ov in add if not user_sets(cmd, ov.lstrip("+").split("=", 1)[0])]


# --- the run: directory, environment, processes -------------------------------------------------------
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
    marker = property(lambda self: f"{MARKER}={self.run_dir}")

    def setup_auth(self, create: bool) -> None:
        """Ray token authentication, explicit so that every node and the driver agree: ``create``
        writes a fresh token for a cluster this run starts; joining uses this run's token when
        there is one and otherwise leaves Ray's own defaults alone."""
        env = self.environ
        if env.get("RAY_AUTH_MODE", "token").lower() != "token":
            return
        if env.get("RAY_AUTH_TOKEN") or env.get("RAY_AUTH_TOKEN_PATH"):
            env["RAY_AUTH_MODE"] = "token"
            return
        token = self.state_dir / "auth_token"
        if not create and not (token.is_file() and token.stat().st_size):
            return
        if create and not self.opts.dry_run and not token.is_file():
            fd = os.open(token, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(secrets.token_hex(32))
        env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=str(token))

    def ray_start(self, role: str, resources: str | None, address: str | None) -> list:
        """``env MARKER FORWARDED... ray start ... --block`` for a head or a worker."""
        o, env = self.opts, self.environ
        envs = [self.marker] + [f"{k}={v}" for k, v in forwarded_env(self.environ).items()]
        envs += [f"{k}={env[k]}" for k in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN_PATH") if env.get(k)]
        ray_bin = env.get("SOFT_SPATIAL_RAY_BIN") or _ray_bin()
        argv = ["env", *envs, ray_bin, "start", "--block", "--disable-usage-stats",
                f"--num-cpus={o.num_cpus}", f"--num-gpus={o.num_gpus}"]
        if role == "head":
            argv += ["--head", f"--port={o.port}", f"--ray-client-server-port={o.client_port}"]
            argv += (["--include-dashboard=true", f"--dashboard-port={o.dashboard_port}"]
                     if o.dashboard else ["--include-dashboard=false"])
            argv += [f"--node-ip-address={o.head_ip}"] if o.head_ip else []
        else:
            argv += [f"--address={address}"] + ([f"--node-ip-address={o.node_ip}"] if o.node_ip else [])
        for flag, value in (("--dashboard-agent-listen-port", o.agent_port),
                            ("--resources", resources), ("--object-store-memory", o.object_store),
                            ("--temp-dir", o.temp_dir)):
            if value is not None:
                argv.append(f"{flag}={value}")
        return argv

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


def _ray_bin() -> str:
    beside = Path(sys.executable).parent / "ray"
    return str(beside) if beside.exists() else (shutil.which("ray") or "ray")


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
def resolve_head_ip(opts: Options, head: str, in_slurm: bool) -> str:
    """The head node's IP as the other nodes reach it (``--head-ip`` wins)."""
    if opts.head_ip:
        return opts.head_ip
    if not in_slurm:
        if opts.dry_run:
            return "<head-ip>"
        from soft_spatial.compat.ray import node_ip_address
        return node_ip_address()
    try:
        ip = socket.getaddrinfo(head, None, socket.AF_INET)[0][4][0]
    except (socket.gaierror, IndexError):
        ip = ""
    if (not ip or ip.startswith("127.")) and not opts.dry_run and shutil.which("srun"):
        res = subprocess.run(["srun", "--overlap", "--nodes=1", "--ntasks=1", "-w", head,
                              "hostname", "--ip-address"], capture_output=True, text=True)
        ip = (res.stdout.split() or [""])[0]
    if not ip:
        if not opts.dry_run:
            raise LaunchError(f"cannot resolve the IP of head node {head} (set SOFT_SPATIAL_HEAD_IP)")
        ip = f"<ip-of-{head}>"
    return ip


def cmd_nodes(opts: Options, environ: dict) -> int:
    nodes = node_list(environ)
    print(f"count={len(nodes)}")
    for i, n in enumerate(nodes):
        print(f"node[{i}]={n}")
    return 0


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
    argv = run.ray_start(role, opts.resources, address)
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


@dataclass
class Plan:
    """What ``launch`` starts: Ray processes ``[(name, argv)]`` (the head first) and the driver."""

    mode: str  # slurm | local | existing
    nnodes: int
    address: str
    starts: list
    driver: list
    expected: list  # node names the timeout error may name


def plan_launch(opts: Options, run: Run) -> Plan:
    """The launch plan for ``opts`` (ports and the head IP resolved; nothing started)."""
    environ = run.environ
    in_slurm = bool(environ.get("SLURM_JOB_ID"))
    starts, expected = [], []
    if opts.address:
        mode, nnodes, address = "existing", opts.nodes or 1, opts.address
    else:
        if in_slurm:
            mode, nodes = "slurm", node_list(environ)
            head = environ.get("SOFT_SPATIAL_HEAD_NODE") or nodes[0]
            names = [head] + [n for n in nodes if n != head]
            expected = names
        else:
            mode, head = "local", this_host()
            names = [f"local{i}" for i in range(opts.local_nodes)]
        nnodes = len(names)
        resolve_ports(opts, "head", in_slurm)
        head_ip = resolve_head_ip(opts, head, in_slurm)
        if not head_ip.startswith("<"):  # a dry run's placeholder is only printed
            opts.head_ip = head_ip
        address = f"{head_ip}:{opts.port}"
        srun_extra = shlex.split(environ.get("SOFT_SPATIAL_SRUN_ARGS", ""))
        for idx, node in enumerate(names):
            resources = opts.resources
            if mode == "local":
                resources = merge_resources(resources, {f"local_node_{idx}": 1})
                if idx > 0:  # every further raylet here needs its own agent port
                    opts.agent_port = None
                    resolve_ports(opts, "worker", in_slurm)
            role = "head" if idx == 0 else "worker"
            argv = run.ray_start(role, resources, address)
            if mode == "slurm":
                srun = ["srun", "--nodes=1", "--ntasks=1", "-w", node, "--export=ALL"]
                if environ.get("SLURM_CPUS_PER_TASK"):
                    srun.append(f"--cpus-per-task={environ['SLURM_CPUS_PER_TASK']}")
                argv = srun + srun_extra + argv
            starts.append((f"{role}-{node}", argv))
    driver = list(opts.cmd)
    if opts.trainer_args:
        driver += trainer_overrides(opts.cmd, nnodes, opts.trainer_gpus, run.run_dir,
                                    forwarded_env(run.environ))
    if mode == "slurm" and this_host() != head.split(".")[0]:
        driver = ["srun", "--overlap", "--nodes=1", "--ntasks=1", "-w", head, "--export=ALL",
                  *driver]
    return Plan(mode, nnodes, address, starts, driver, expected)


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
        plan = plan_launch(opts, run)
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


COMMANDS = {"launch": cmd_launch, "head": cmd_node, "worker": cmd_node, "wait": cmd_wait,
            "stop": cmd_stop, "nodes": cmd_nodes}


def main(argv: list | None = None, environ: dict | None = None) -> int:
    """Run a subcommand; ``environ`` defaults to this process's environment, which then also
    receives the run's settings (Ray's token, RAY_ADDRESS) before Ray is imported here."""
    environ = os.environ if environ is None else environ
    try:
        opts = parse_args(sys.argv[1:] if argv is None else argv, environ)
        return COMMANDS[opts.subcommand](opts, environ)
    except LaunchError as e:
        log(f"error: {e}")
        return 1


if __name__ == "__main__":
    sys.exit(main())
