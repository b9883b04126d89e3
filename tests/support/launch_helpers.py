"""Helpers of the launcher tests (tests/launch/, tests/e2e/test_multinode_train.py): a clean
environment, simulated Slurm nodes, the launch plan of a dry run, and a real two-node Ray cluster
on this machine started and stopped with the launcher (its processes found by the run's tether
marker and ended with the tether's reaper)."""
from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from soft_spatial.infra import tether
from soft_spatial.infra.ray_env import FORWARD_ENV
from soft_spatial.launch import __main__ as cli
from soft_spatial.launch import cluster, plan

ROOT = Path(__file__).resolve().parents[2]
FORWARD_PREFIX = plan.FORWARD_PREFIX
PLUGIN = "soft_spatial.plugin"
# How the launcher forwards VERL_USE_EXTERNAL_MODULES=soft_spatial.plugin to the training command.
FORWARDED_PLUGIN = f"{FORWARD_PREFIX}VERL_USE_EXTERNAL_MODULES='{PLUGIN}'"
# Source for the scripts the cluster tests run on the cluster: ``remote_env(resources)`` is
# ``VERL_USE_EXTERNAL_MODULES`` in a Ray worker of each node, a node named by its custom resource.
REMOTE_ENV_PY = """
def remote_env(resources):
    import os, ray

    @ray.remote(num_cpus=0)
    def env_of_worker(name):
        return os.environ.get(name)

    return {res: ray.get(env_of_worker.options(resources={res: 1}).remote("VERL_USE_EXTERNAL_MODULES"))
            for res in resources}
"""
# listed, extra (SOFT_SPATIAL_FORWARD_ENV), empty and unlisted variables: what is forwarded of them
MIXED_ENV = {"VERL_USE_EXTERNAL_MODULES": "other.mod", "HF_HUB_OFFLINE": "1", "PYTHONPATH": "/p",
             "SOFT_SPATIAL_FORWARD_ENV": "NCCL_DEBUG, WANDB_MODE", "NCCL_DEBUG": "INFO", "WANDB_MODE": "",
             "UNLISTED": "x"}


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without Slurm/Ray/launcher/forwarded variables, the venv's bin
    first on PATH and this checkout first on PYTHONPATH (so that Ray's workers import it too)."""
    drop_prefixes = ("SLURM_", "SOFT_SPATIAL_", "RAY_", "SGLANG_")
    drop = {"DRY_RUN", "RUN_DIR", *FORWARD_ENV}
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop_prefixes) and k not in drop}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = str(ROOT)
    env.update(extra)
    return env


def slurm_env(**extra: str) -> dict[str, str]:
    """Two simulated Slurm nodes gpu-a and gpu-b with 4 GPUs and 16 CPUs each (job 123)."""
    slurm = {
        "SLURM_JOB_ID": "123",
        "SLURM_NNODES": "2",
        "SOFT_SPATIAL_NODELIST": "gpu-a gpu-b",
        "SLURM_GPUS_PER_NODE": "4",
        "SLURM_CPUS_PER_TASK": "16",
    }
    return clean_env(**{**slurm, **extra})


def dry_plan(*argv: str, env: dict[str, str], run_dir: Path | None = None) -> plan.Plan:
    """The launch plan for ``argv`` in ``env`` (a dry run: nothing is resolved on this machine)."""
    opts = cli.parse_args(["--dry-run", *argv], env)
    plan.resolve_resources(opts, env)
    run = cluster.Run(opts, dict(env), run_dir or ROOT / "runs" / "123")
    run.setup_auth(create=True)
    return plan.plan_launch(opts, run.environ, run.run_dir)


def starts(p: plan.Plan) -> tuple[list[str], list[str]]:
    """(head argv, worker argv) of a two-node plan."""
    (head_name, head), (worker_name, worker) = p.starts
    assert head_name.startswith("head-") and worker_name.startswith("worker-")
    return head, worker


def run_launcher(*args: str, env: dict[str, str], timeout: float = 60):
    """``python -m soft_spatial.launch ARGS`` in a subprocess (the way slurm/*.sbatch run it)."""
    return subprocess.run([sys.executable, "-m", "soft_spatial.launch", *args], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


def marker_pids(run_dir: Path) -> list[int]:
    """Live processes carrying the run's tether marker for run_dir (every process it started)."""
    return tether.members(cluster.run_marker(run_dir))


def kill_leftovers(run_dir: Path, extra_pids: list[int] = ()) -> None:
    """Last-resort cleanup after a failed test: the tether's reaper on the run's processes and on
    the sessions of ``extra_pids``."""
    tether.reap(cluster.run_marker(run_dir), list(extra_pids), grace_s=10.0)


def assert_no_processes_left(run_dir: Path) -> None:
    deadline = time.monotonic() + 10
    while marker_pids(run_dir) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert marker_pids(run_dir) == [], "Ray processes of the run are still alive"


def parse_check(script: Path, res: subprocess.CompletedProcess) -> dict:
    """What the check script ``script`` wrote next to itself (its ``.json``)."""
    out = script.with_suffix(".json")
    assert out.is_file(), f"{script} wrote no {out.name}:\n{res.stdout[-4000:]}{res.stderr[-4000:]}"
    return json.loads(out.read_text())


@dataclass
class RayCluster:
    """A Ray cluster started by ``python -m soft_spatial.launch`` on this machine."""

    run_dir: Path
    address: str
    env: dict[str, str]
    options: list[str] = field(default_factory=list)

    def launcher(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        return run_launcher(*self.options, *args, env=self.env, timeout=timeout)


def small_ray_options(run_dir: Path, temp_dir: str, num_cpus: int = 1) -> list[str]:
    """Options that keep a test cluster small: few CPUs, no dashboard, 100 MB object store."""
    return [
        "--run-dir", str(run_dir), "--temp-dir", temp_dir, "--no-dashboard",
        "--num-cpus", str(num_cpus), "--object-store-memory", str(100 * 1024 * 1024),
        "--timeout", "120",
    ]  # fmt: skip


@contextlib.contextmanager
def two_node_cluster(run_dir: Path, temp_dir: str, head_cpus: int = 1, **env_extra: str):
    """Head (resource node_a, ``head_cpus`` CPUs) + worker (node_b, 1 CPU) as two raylets on this
    machine, started with the launcher's `head`/`worker` subcommands and torn down with `stop`;
    asserts that no process of the run survives. Yields the head's :class:`RayCluster`."""
    env = clean_env(VERL_USE_EXTERNAL_MODULES=PLUGIN, **env_extra)
    head = RayCluster(run_dir, "", env, small_ray_options(run_dir, temp_dir, head_cpus))
    worker = RayCluster(run_dir, "", env, small_ray_options(run_dir, temp_dir))
    try:
        for c, args in ((head, ("head", "--resources", '{"node_a": 1}')),
                        (worker, ("worker", "--resources", '{"node_b": 1}'))):
            res = c.launcher(*args)
            assert res.returncode == 0, res.stdout + res.stderr
        head.address = (run_dir / "ray" / "address").read_text().strip()
        res = head.launcher("wait", "--nodes", "2")
        assert res.returncode == 0, res.stdout + res.stderr
        yield head
        res = head.launcher("stop")
        assert res.returncode == 0, res.stdout + res.stderr
        assert_no_processes_left(run_dir)
    finally:
        kill_leftovers(run_dir)
