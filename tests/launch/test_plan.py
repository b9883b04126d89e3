"""The launch plan (`soft_spatial.launch.plan`): the node list, GPU and CPU counts, ports, what each
node starts and what the driver runs, in Slurm, on local "nodes" and on an existing cluster, and
the Hydra overrides it appends. Dry runs: nothing is started or created."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from launch_helpers import (FORWARD_PREFIX, FORWARDED_PLUGIN, MIXED_ENV, PLUGIN, ROOT, clean_env, dry_plan,
                            slurm_env, starts)
from soft_spatial.infra.ray_env import forwarded_env
from soft_spatial.launch import __main__ as cli
from soft_spatial.launch import plan


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


def test_the_launch_plan_forwards_the_one_list():
    """Every ``ray start`` and the driver's runtime_env carry exactly the forwarded environment
    (``infra.ray_env``, the list training and the rollout replicas use)."""
    p = dry_plan("launch", "--", "python", env=slurm_env(**MIXED_ENV))
    head, _ = starts(p)
    assert {a.split("=", 1)[0] for a in head[6:] if "=" in a and not a.startswith("-")} == {
        *forwarded_env(MIXED_ENV), "RAY_AUTH_MODE", "RAY_AUTH_TOKEN_PATH"}
    assert sorted(a for a in p.driver if a.startswith(FORWARD_PREFIX)) == sorted(
        f"{FORWARD_PREFIX}{k}={plan.hydra_quote(v)}" for k, v in forwarded_env(MIXED_ENV).items())


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
