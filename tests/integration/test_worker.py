"""The soft worker (`soft_spatial.integration.worker`), its parts that run without verl's trainer:
each rank's placement record, and the controller state sent after a weight sync. What runs inside
verl's trainer (``init_model`` configuring the soft engines and the loss, ``update_weights``
sending the controller to the rollout server) is exercised by every training run of the tests
(tests/e2e/test_train_cpu.py; placements on two nodes: tests/e2e/test_multinode_train.py)."""
import json
from types import SimpleNamespace

import pytest
import torch


@pytest.fixture(scope="module")
def worker():
    from soft_spatial.integration.platform import use_cpu_platform

    use_cpu_platform()  # the platform must exist before verl's workers import
    from soft_spatial.integration import worker
    return worker


def test_each_rank_records_where_it_runs_in_the_run_directory(worker, tmp_path, monkeypatch):
    import ray

    monkeypatch.setattr(ray, "get_runtime_context", lambda: SimpleNamespace(get_node_id=lambda: "node-7"))
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.delenv("SOFT_SPATIAL_RUN_DIR", raising=False)
    info = worker.record_placement("actor/rollout")
    assert {k: info[k] for k in ("role", "rank", "world_size", "node_id")} == {
        "role": "actor/rollout", "rank": 3, "world_size": 4, "node_id": "node-7"}
    assert list(tmp_path.iterdir()) == []  # no run directory: a log line only
    monkeypatch.setenv("SOFT_SPATIAL_RUN_DIR", str(tmp_path))
    info = worker.record_placement("actor/rollout")
    (path,) = (tmp_path / "workers").iterdir()
    assert path.name == "actor_rollout-rank3.json" and json.loads(path.read_text()) == info


def test_the_controller_state_is_the_actors_adaptsoft_controllers_or_none(worker):
    from soft_spatial.softthink import AdaptSoft, AdaptSoftConfig

    ctrl = AdaptSoft.from_config(AdaptSoftConfig(), 8)
    with torch.no_grad():  # trained weights: not what a fresh controller starts from
        for p in ctrl.parameters():
            p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())))
    state = worker.SoftActorRolloutRefWorker.controller_state
    with_adaptsoft = SimpleNamespace(actor=SimpleNamespace(engine=SimpleNamespace(
        adaptsoft=SimpleNamespace(controller=ctrl))))
    sent = state(with_adaptsoft)
    restored = AdaptSoft.from_state(sent)  # what the rollout server rebuilds from it
    assert restored.state_dict().keys() == ctrl.state_dict().keys()
    assert all(restored.state_dict()[k].equal(v) for k, v in ctrl.state_dict().items())
    assert state(SimpleNamespace(actor=SimpleNamespace(engine=SimpleNamespace(adaptsoft=None)))) is None
    assert state(SimpleNamespace(actor=None)) is None  # a ref-only worker
