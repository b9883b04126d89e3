"""Helpers of the launcher tests (tests/launch/): a clean environment, simulated Slurm nodes and the
launch plan of a dry run."""
from __future__ import annotations

import os
import sys
from pathlib import Path

from soft_spatial.infra.ray_env import FORWARD_ENV
from soft_spatial.launch import __main__ as cli
from soft_spatial.launch import cluster, plan

ROOT = Path(__file__).resolve().parents[2]
FORWARD_PREFIX = plan.FORWARD_PREFIX
PLUGIN = "soft_spatial.plugin"
# How the launcher forwards VERL_USE_EXTERNAL_MODULES=soft_spatial.plugin to the training command.
FORWARDED_PLUGIN = f"{FORWARD_PREFIX}VERL_USE_EXTERNAL_MODULES='{PLUGIN}'"
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
