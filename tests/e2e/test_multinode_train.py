"""One training step with world size 2 across a two-node Ray cluster on one machine, in the hard
preset (its one end-to-end run: discrete thinking through the same rollout, records and replay).

The cluster is started with the launcher that runs under Slurm (python -m soft_spatial.launch:
a head and a worker raylet with separate resources). The head has 2 CPUs (the TaskRunner takes one,
one training worker the other) and the worker node 1, so verl's two worker placement groups must
land on different nodes. The training command runs through `soft_spatial.launch launch`, which appends
`trainer.nnodes=2` and the plugin environment after the command's own arguments and names the run
directory; both nodes' Ray workers have the plugin in their environment (a task on each, after
training, in a job without the training's runtime_env); and waiting for a third node that never
comes fails naming the count (one cluster for the training step and the launcher's checks).
"""
from __future__ import annotations

import json
import sys

import pytest

from launch_helpers import FORWARDED_PLUGIN, PLUGIN, REMOTE_ENV_PY, ROOT, parse_check, two_node_cluster

WRAPPER = REMOTE_ENV_PY + r'''
import json, os, sys
from pathlib import Path
import ray
from hydra import compose, initialize_config_dir
from soft_spatial.train import CONFIG_DIR, run
with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
    cfg = compose(config_name="train", overrides=sys.argv[1:])
run(cfg)
alive = sorted(n["NodeID"] for n in ray.nodes() if n["Alive"])
ray.shutdown()  # a job of its own, without the training's runtime_env: the nodes' environment
ray.init(address="auto", logging_level="ERROR", log_to_driver=False)
Path(sys.argv[0]).with_suffix(".json").write_text(json.dumps(
    {"alive_nodes": alive, "argv": sys.argv[1:], "remote_env": remote_env(["node_a", "node_b"]),
     "run_dir": os.environ.get("RUN_DIR")}))
'''


@pytest.fixture
def uneven_two_node_cluster(tmp_path, short_temp_dir):
    with two_node_cluster(tmp_path / "run", short_temp_dir, head_cpus=2, HF_HUB_OFFLINE="1",
                          RAY_USAGE_STATS_ENABLED="0") as cluster:
        yield cluster


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_one_training_step_across_two_nodes(uneven_two_node_cluster, tiny_qwen3_vl_small,
                                            tmp_path):
    from train_helpers import assert_one_step, prepare_train_data
    data = prepare_train_data(tmp_path / "data", tiny_qwen3_vl_small)
    wrapper = tmp_path / "train_and_check.py"
    wrapper.write_text(WRAPPER)
    cluster = uneven_two_node_cluster
    args = ["model=tiny", "cluster=cpu", f"model.path={tiny_qwen3_vl_small}",
            f"data.train_files={data / 'train.parquet'}", f"data.val_files={data / 'test.parquet'}",
            "trainer.total_training_steps=1", "trainer.save_freq=-1",
            "actor_rollout_ref.rollout.agent.num_workers=1",
            "experiment=hard",
            f"reward.custom_reward_function.path={ROOT / 'tests' / 'support' / 'smoke_reward.py'}"]
    res = cluster.launcher("launch", "--address", cluster.address, "--nodes", "2",
                           "--trainer-gpus-per-node", "1", "--", sys.executable, str(wrapper), *args,
                           timeout=840)
    assert res.returncode == 0, (res.stdout + res.stderr)[-6000:]
    out = parse_check(wrapper, res)
    argv = out["argv"]  # the command's own arguments first, then the launcher's
    assert argv[:len(args) + 1] == [*args, "trainer.nnodes=2"] and "trainer.n_gpus_per_node=1" in argv
    assert FORWARDED_PLUGIN in argv and out["run_dir"] == str(cluster.run_dir)
    assert out["remote_env"] == {"node_a": PLUGIN, "node_b": PLUGIN}
    assert len(out["alive_nodes"]) == 2
    # each training worker records its placement in the run directory (not a forwarded log line,
    # whose arrival at the driver depends on timing)
    placed = [json.loads(p.read_text())
              for p in sorted((cluster.run_dir / "checkpoints" / "workers").glob("*-rank*.json"))]
    ranks = {w["rank"]: w["node_id"] for w in placed if w["world_size"] == 2}
    assert set(ranks) == {0, 1}, placed
    assert ranks[0] != ranks[1] and set(ranks.values()) == set(out["alive_nodes"])
    metrics = json.loads((cluster.run_dir / "checkpoints" / "metrics.jsonl").read_text()
                         .splitlines()[0])
    assert metrics["step"] == 1
    assert_one_step(metrics["data"], "hard")
    # waiting for a node that never comes fails with the count of the alive ones
    res = cluster.launcher("--timeout", "3", "wait", "--nodes", "3")
    assert res.returncode != 0 and "2/3 Ray nodes alive" in res.stderr
