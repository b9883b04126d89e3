"""The node plan: which nodes, how many CPUs and GPUs, which ports and addresses, which `ray start`
command on each node and which driver command (pure functions of the options and the environment;
they may ask Slurm or the machine, and never start a process of their own).
"""
from __future__ import annotations

import collections
import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from soft_spatial.compat.ray import node_ip_address
from soft_spatial.infra.ray_env import forwarded_env
from soft_spatial.launch import hostlist

FORWARD_PREFIX = "++ray_kwargs.ray_init.runtime_env.env_vars."
DEFAULT_PORTS = {"port": 6379, "client_port": 10001, "dashboard_port": 8265}
DEFAULT_AGENT_PORT = 52365  # Ray's fixed dashboard-agent port
NODELIST_VARS = ("SOFT_SPATIAL_NODELIST", "SLURM_JOB_NODELIST")  # the node list's sources, in order


class LaunchError(RuntimeError):
    """A problem the user can fix; printed as one line, exit code 1."""


def log(msg: str) -> None:
    print(f"[launch {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


@dataclass
class Options:
    """What the launcher was asked: the flags, each defaulting to its environment variable
    (``__main__.parse_args``); resources, ports and the head IP are filled in by the plan."""

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


# --- nodes and resources ------------------------------------------------------------------------------
def this_host() -> str:
    return socket.gethostname().split(".")[0]


def node_list(environ=os.environ) -> list:
    """The allocation's nodes: ``$SOFT_SPATIAL_NODELIST``, else ``$SLURM_JOB_NODELIST``, each a Slurm
    hostlist ("gpu[01-03,07]", "gpu-a gpu-b") expanded as ``scontrol show hostnames`` does
    (``hostlist.expand``), else this host; the count checked against SLURM_NNODES (when set) whichever
    gave it, and a node named twice refused (each node gets one Ray node)."""
    var = next((v for v in NODELIST_VARS if environ.get(v)), None)
    if var:
        try:
            nodes = hostlist.expand(environ[var], var)
        except hostlist.HostlistError as e:
            raise LaunchError(str(e)) from None
        if not nodes:
            raise LaunchError(f"{var}={environ[var]!r} names no node")
        source = f"{var}={environ[var]!r}"
    else:
        nodes = [this_host()]
        source = f"this host (neither {' nor '.join(NODELIST_VARS)} is set)"
    repeated = sorted(n for n, k in collections.Counter(nodes).items() if k > 1)
    if repeated:
        raise LaunchError(f"{source} names {' '.join(repeated)} more than once (one Ray node per node)")
    want = environ.get("SLURM_NNODES")
    if want:
        if not want.strip().isdigit():
            raise LaunchError(f"SLURM_NNODES={want!r} is not a node count")
        if len(nodes) != int(want):
            raise LaunchError(f"{source} gives {len(nodes)} nodes but SLURM_NNODES={want}: "
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


# --- the Ray start commands -------------------------------------------------------------------------
def _ray_bin() -> str:
    beside = Path(sys.executable).parent / "ray"
    return str(beside) if beside.exists() else (shutil.which("ray") or "ray")


def ray_start(opts: Options, environ: dict, run_dir: Path, role: str, resources: str | None,
              address: str | None) -> list:
    """``env FORWARDED... ray start ... --block`` for a head or a worker of the run in ``run_dir`` (the
    run's tether marker reaches its processes through the environment the command is started
    with: ``cluster.Run.start``; srun passes it on with ``--export=ALL``)."""
    o, env = opts, environ
    envs = [f"{k}={v}" for k, v in forwarded_env(environ).items()]
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


def resolve_head_ip(opts: Options, head: str, in_slurm: bool) -> str:
    """The head node's IP as the other nodes reach it (``--head-ip`` wins)."""
    if opts.head_ip:
        return opts.head_ip
    if not in_slurm:
        if opts.dry_run:
            return "<head-ip>"
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


# --- the launch plan ----------------------------------------------------------------------------------
@dataclass
class Plan:
    """What ``launch`` starts: Ray processes ``[(name, argv)]`` (the head first) and the driver."""

    mode: str  # slurm | local | existing
    nnodes: int
    address: str
    starts: list
    driver: list
    expected: list  # node names the timeout error may name


def plan_launch(opts: Options, environ: dict, run_dir: Path) -> Plan:
    """The launch plan for ``opts`` and the run in ``run_dir`` (ports and the head IP resolved;
    nothing started). ``environ`` is the run's environment (with its Ray token settings)."""
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
            argv = ray_start(opts, environ, run_dir, role, resources, address)
            if mode == "slurm":
                srun = ["srun", "--nodes=1", "--ntasks=1", "-w", node, "--export=ALL"]
                if environ.get("SLURM_CPUS_PER_TASK"):
                    srun.append(f"--cpus-per-task={environ['SLURM_CPUS_PER_TASK']}")
                argv = srun + srun_extra + argv
            starts.append((f"{role}-{node}", argv))
    driver = list(opts.cmd)
    if opts.trainer_args:
        driver += trainer_overrides(opts.cmd, nnodes, opts.trainer_gpus, run_dir, forwarded_env(environ))
    if mode == "slurm" and this_host() != head.split(".")[0]:
        driver = ["srun", "--overlap", "--nodes=1", "--ntasks=1", "-w", head, "--export=ALL",
                  *driver]
    return Plan(mode, nnodes, address, starts, driver, expected)
