"""The ``local_soft`` rollout backend (`soft_spatial.rollout.replica`) with Ray stood in by
recorders: a replica launches one named server actor with the run's soft settings, the forwarded
environment and its model, waits for it, and publishes it to verl; a training worker's adapter
forwards the weights and the controller only from its replica's leader rank, every rank draining
the weight generator. (Registration in verl's registries: tests/test_plugin.py.)"""
import asyncio
from types import SimpleNamespace

import pytest
import torch

from soft_spatial.infra.ray_env import forwarded_env
from soft_spatial.softthink.settings import SoftSettings

pytest.importorskip("verl")
from soft_spatial.rollout import replica as R  # noqa: E402

SETTINGS = SoftSettings.from_dict({"soft_thinking": {"mode": "fixed"}, "seed": 5})


def rollout_config(**kw):
    from verl.workers.config import RolloutConfig

    return RolloutConfig(**{"name": "local_soft", "mode": "async", "tensor_model_parallel_size": 1,
                            "response_length": 8, "prompt_length": 16,
                            "custom": SETTINGS.to_dict(), **kw})


class Remote:
    """A method of a stand-in actor handle: ``.remote(...)`` records the call, awaitably."""

    def __init__(self, calls, name):
        self.calls, self.name = calls, name

    def remote(self, *args, **kwargs):
        self.calls.append((self.name, args, kwargs))
        future = asyncio.get_running_loop().create_future()
        future.set_result(None)
        return future


class Handle:
    def __init__(self):
        self.calls = []

    def __getattr__(self, name):
        return Remote(self.calls, name)


class FakeRay:
    """``ray.remote(cls).options(**o).remote(**kw)`` → a Handle, every step recorded."""

    def __init__(self):
        self.created, self.handles = [], {}

    def remote(self, cls):
        ray = self

        class Actor:
            @staticmethod
            def options(**options):
                return SimpleNamespace(remote=lambda **kwargs: ray._create(cls, options, kwargs))
        return Actor

    def _create(self, cls, options, kwargs):
        handle = self.handles[options["name"]] = Handle()
        self.created.append((cls, options, kwargs))
        return handle

    def get_actor(self, name):
        return self.handles[name]


@pytest.mark.parametrize("dtype, server_dtype", [("bf16", "bfloat16"), ("float16", "float16"), ("float32", "float32")])
def test_a_replica_launches_one_named_server_with_the_runs_settings_and_publishes_it(monkeypatch, dtype, server_dtype):
    ray = FakeRay()
    monkeypatch.setattr(R, "ray", ray)
    replica = R.LocalSoftReplica(replica_rank=2, config=rollout_config(dtype=dtype),
                                 model_config=SimpleNamespace(local_path="/models/m"), gpus_per_node=1,
                                 name_suffix="val")
    asyncio.run(replica.launch_servers())
    ((cls, options, kwargs),) = ray.created
    assert cls is R.LocalSoftServer
    assert options == {"name": "local_soft_server_2_val", "num_cpus": 0, "max_concurrency": replica.max_concurrency,
                       "runtime_env": {"env_vars": forwarded_env()}}
    assert kwargs == {"model_path": "/models/m", "response_length": 8, "prompt_length": 16,
                      "settings": SETTINGS, "dtype": server_dtype}
    handle = ray.handles["local_soft_server_2_val"]
    assert handle.calls == [("wake_up", (), {})]  # construction errors surface at launch
    assert replica.servers == [handle] and replica.server_handle is handle
    assert replica.server_address == "local_soft://local_soft_server_2_val"


def test_a_replica_refuses_tensor_parallelism_and_a_model_without_a_path(monkeypatch):
    ray = FakeRay()
    monkeypatch.setattr(R, "ray", ray)
    tp = R.LocalSoftReplica(0, rollout_config(tensor_model_parallel_size=2), {"path": "/m"}, gpus_per_node=2)
    with pytest.raises(ValueError, match="tensor_model_parallel_size=1"):
        asyncio.run(tp.launch_servers())
    pathless = R.LocalSoftReplica(0, rollout_config(), SimpleNamespace(local_path=None, path=None))
    with pytest.raises(ValueError, match="the model config has no path"):
        asyncio.run(pathless.launch_servers())
    assert ray.created == []
    assert R._model_path({"path": "/a"}) == "/a" and R._model_path({"local_path": "/b", "path": "/a"}) == "/b"


def test_only_the_replicas_leader_forwards_weights_and_the_controller(monkeypatch):
    ray = FakeRay()
    monkeypatch.setattr(R, "ray", ray)
    for name in ("local_soft_server_0", "local_soft_server_1"):
        ray.handles[name] = Handle()
    weights = {"a": torch.arange(3.0), "b": torch.ones(2, 2)}
    sent = {}
    for rank in range(4):  # two replicas of a data-parallel world of 2
        monkeypatch.setenv("RANK", str(rank))
        adapter = R.LocalSoftServerAdapter(rollout_config(data_parallel_size=2), None, None)
        assert (adapter.replica_rank, adapter.is_leader) == (rank // 2, rank % 2 == 0)
        drained = []
        gen = ((k, drained.append(k) or v) for k, v in weights.items())
        asyncio.run(adapter.update_weights(gen))
        assert drained == ["a", "b"]  # every rank consumes the (collective) generator
        asyncio.run(adapter.update_controller({"config": {}, "state_dict": {}}))
        asyncio.run(adapter.update_controller(None))
        with pytest.raises(NotImplementedError, match="named tensors"):
            asyncio.run(adapter.update_weights(iter(()), wire_format="bucketed"))
    for replica in (0, 1):
        calls = ray.handles[f"local_soft_server_{replica}"].calls
        assert [c[0] for c in calls] == ["update_weights", "set_controller"]  # from its leader only
        sent[replica] = calls[0][1][0]
        assert sent[replica].keys() == weights.keys()
        assert all(torch.equal(sent[replica][k], weights[k]) and sent[replica][k] is not weights[k]
                   for k in weights)  # copies: the worker's tensors are not shared
