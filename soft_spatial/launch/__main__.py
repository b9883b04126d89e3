"""Ray cluster start-up for soft_spatial, inside or outside Slurm (docs/launch.md).

    python -m soft_spatial.launch [options] launch -- python -m soft_spatial.train experiment=adaptsoft ...
    python -m soft_spatial.launch [options] head|worker|wait|stop|nodes

Subcommands
  launch -- CMD...  Driver mode (what slurm/*.sbatch run). Starts a Ray head on the first node and a
                    worker on every other node (`srun --nodes=1 --ntasks=1 -w NODE` under Slurm), waits
                    until the cluster reports every node, runs CMD on the head with
                    trainer.nnodes=N trainer.n_gpus_per_node=G trainer.default_local_dir=RUN_DIR/checkpoints
                    and the forwarded environment (++ray_kwargs.ray_init.runtime_env.env_vars.X=...)
                    appended (a key already given in CMD is left as given), tears Ray down on exit, INT,
                    TERM or HUP and exits with CMD's exit code (128 + the signal after one).
                    Outside Slurm: --local-nodes K starts K raylets on this machine (head + K-1 workers,
                    custom resource local_node_<i> on each); --address A runs CMD against a running
                    cluster (nothing is started or stopped).
  head              Start a Ray head on this machine (in the background; --foreground to block).
  worker            Start a Ray worker on this machine joining --address (default: the address the
                    last `head` of this RUN_DIR wrote).
  wait              Wait until --address reports --nodes alive nodes (or --timeout, then name the
                    missing ones and fail).
  stop              Stop the Ray processes that head/worker/launch started for this RUN_DIR (each
                    recorded process's session, then any process that still carries this run's
                    tether marker: soft_spatial/infra/tether.py). Never `ray stop`.
  nodes             Print the node list this launcher would use (count=N, then node[i]=NAME lines).

Options, with their environment equivalents in brackets, are listed below. Other environment:
  SOFT_SPATIAL_NODELIST="n1 n2"  node list override (else $SLURM_JOB_NODELIST); either is a Slurm hostlist
                                 ("gpu[01-03,07]"), expanded as `scontrol show hostnames` does
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
import os
import sys

from soft_spatial.infra.signals import command
from soft_spatial.launch.cluster import cmd_launch, cmd_node, cmd_stop, cmd_wait
from soft_spatial.launch.plan import LaunchError, Options, log, node_list

SUBCOMMANDS = ("launch", "head", "worker", "wait", "stop", "nodes")


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


def cmd_nodes(opts: Options, environ: dict) -> int:
    nodes = node_list(environ)
    print(f"count={len(nodes)}")
    for i, n in enumerate(nodes):
        print(f"node[{i}]={n}")
    return 0


COMMANDS = {"launch": cmd_launch, "head": cmd_node, "worker": cmd_node, "wait": cmd_wait,
            "stop": cmd_stop, "nodes": cmd_nodes}


def main(argv: list | None = None, environ: dict | None = None) -> int:
    """Run a subcommand; ``environ`` defaults to this process's environment, which then also
    receives the run's settings (Ray's token, RAY_ADDRESS) before Ray is imported here."""
    environ = os.environ if environ is None else environ
    # SIGTERM and SIGHUP end it as Ctrl-C does: what it started is stopped, exit 128 + the signal
    with command("python -m soft_spatial.launch", "every process it started was stopped"):
        try:
            opts = parse_args(sys.argv[1:] if argv is None else argv, environ)
            return COMMANDS[opts.subcommand](opts, environ)
        except LaunchError as e:
            log(f"error: {e}")
            return 1


if __name__ == "__main__":
    sys.exit(main())
