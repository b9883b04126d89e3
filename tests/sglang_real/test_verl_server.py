"""``rollout.name=sglang_soft`` on verl 0.9.1's REAL SGLang server classes (see conftest.py).

* ``SGLangSoftHttpServer`` is built by verl's own ``SGLangHttpServer.__init__`` from the Hydra
  training config ``rollout=sglang`` and the tiny model; its ``launch_server`` runs verl's real
  ``launch_server`` up to SGLang's process launch (replaced here: no GPU), which must receive the
  plugin's scheduler entry point and the server arguments soft decoding needs;
* PARITY: verl's real ``generate`` (real ``GenerateReqInput``) through the plugin's runtime, with
  the records streamed in slices, returns exactly what the ``local_soft`` server returns for the
  same requests: tokens, per-step likelihoods, ``extra_fields["soft_trace"]``, think flag;
* the controller travels through ``SGLangSoftServerAdapter.update_controller`` (real
  ``UpdateWeightsFromTensorReqInput`` and serializer) and the custom weight loader;
* the SGLang internals the server side relies on: tests/sglang_real/test_compat_sglang.py.
"""
from __future__ import annotations

import asyncio
import os
from types import SimpleNamespace

import pytest
import torch
from sglang_replay import ReplayTokenizerManager

from controller_helpers import trained_controller
from engine_spy import capture_local
from soft_spatial.engines.sglang import hooks
from soft_spatial.engines.sglang.client import CONTROLLER_NAME, encode_controller
from soft_spatial.engines.sglang.runtime import SoftRuntime
from soft_spatial.engines.sglang.server_args import CONTROLLER_LOADER, ENV_VAR, SchedulerSetup
from soft_spatial.models import think_end_id
from soft_spatial.softthink.noise import NoiseKey, noise_param
from soft_spatial.softthink.settings import SoftSettings

pytestmark = pytest.mark.sglang


def _configs(model_dir, mode):
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from soft_spatial.train import CONFIG_DIR
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
        cfg = compose(config_name="train", overrides=[
            "rollout=sglang", "model=tiny", f"actor_rollout_ref.model.path={model_dir}",
            f"soft_thinking.mode={mode}", "actor_rollout_ref.rollout.response_length=12",
            "actor_rollout_ref.rollout.prompt_length=32"])
    OmegaConf.resolve(cfg)
    return cfg.actor_rollout_ref.rollout, cfg.actor_rollout_ref.model


@pytest.fixture
def server_factory(tiny_qwen3_vl_small, monkeypatch):
    from verl.workers.rollout.replica import RolloutMode

    from soft_spatial.rollout.sglang_server import SGLangSoftHttpServer
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    monkeypatch.delenv(ENV_VAR, raising=False)

    def make(mode):
        rollout, model = _configs(tiny_qwen3_vl_small, mode)
        server = SGLangSoftHttpServer(rollout, model, RolloutMode.HYBRID, workers=[],
                                      replica_rank=0, node_rank=0, nnodes=1,
                                      cuda_visible_devices="", base_gpu_id=0)
        return server, rollout

    return make


def _fake_launch(monkeypatch, tm):
    """Replace SGLang's process launch and uvicorn inside verl's real launch_server."""
    import sglang.srt.entrypoints.engine as sgl_engine
    import sglang.srt.entrypoints.http_server as http_server
    import verl.workers.rollout.sglang_rollout.async_sglang_server as verl_server
    seen = {}

    class RecordingServerArgs(verl_server.ServerArgs):  # real fields; no device probing
        def __post_init__(self):
            seen["args"] = dict(vars(self))

    def launch(server_args, init_tokenizer_manager_func, run_scheduler_process_func,
               run_detokenizer_process_func):
        seen["scheduler_func"] = run_scheduler_process_func
        seen["env"] = os.environ.get(ENV_VAR)
        return tm, None, {}, None, None

    async def run_uvicorn(app, server_args, address):
        return 0, None

    monkeypatch.setattr(verl_server, "ServerArgs", RecordingServerArgs)
    monkeypatch.setattr(http_server.Engine, "_launch_subprocesses", staticmethod(launch))
    monkeypatch.setattr(verl_server, "run_uvicorn", run_uvicorn)
    seen["original"] = sgl_engine.run_scheduler_process
    return seen


@pytest.mark.parametrize("mode,keyed", [("adaptsoft", False), ("fixed", False), ("fixed", True),
                                        ("hard", False)])
def test_verl_server_matches_local_soft_server(server_factory, tiny_qwen3_vl_small, mode, keyed,
                                               monkeypatch):
    """Both servers seed a request from its noise key when the agent loop sends one (``keyed``),
    else from its request id; in every mode (hard too) a response closed its think block exactly
    when it holds ``</think>``."""
    import sglang.srt.entrypoints.engine as sgl_engine

    from soft_spatial.rollout.server import LocalSoftServer
    from biased_head import BiasedHead
    server, rollout = server_factory(mode)
    local = LocalSoftServer(str(tiny_qwen3_vl_small), response_length=12, prompt_length=32,
                            settings=SoftSettings.from_dict(rollout.custom))
    eng = local.engine
    eng.lm_head = BiasedHead(eng.lm_head, think_end_id(eng.tokenizer), 8.0)
    ctrl = trained_controller(eng.hidden_size, seed=5)
    state = ctrl.to_state()
    if mode == "adaptsoft":
        local.set_controller(state)

    rids = ["req-a", "req-b", "req-c"]
    prompts = [[5, 17, 42, 99, 7], [3, 8], [11, 12, 13, 14]]
    params = {"temperature": 0.8, "top_p": 1.0, "top_k": -1}
    keys = [noise_param(NoiseKey(False, 1, 0, i), 0) if keyed else {} for i in range(len(rids))]

    async def run_local():
        return await asyncio.gather(*(local.generate(request_id=r, prompt_ids=p,
                                                     sampling_params=dict(params, **k))
                                      for r, p, k in zip(rids, prompts, keys)))

    with monkeypatch.context() as mp:
        steps, mixes = capture_local(mp)
        expected = asyncio.run(run_local())
    assert len(steps) > 3

    # launch: verl's real launch_server with the plugin's scheduler entry point
    runtime = {}
    tm = ReplayTokenizerManager(steps, mixes, rids, lambda: runtime["rt"], eng.embed,
                                eng.eos_ids, interval=3)
    seen = _fake_launch(monkeypatch, tm)
    asyncio.run(server.launch_server())
    assert seen["scheduler_func"] is hooks.run_scheduler_process
    assert sgl_engine.run_scheduler_process is seen["original"]  # restored
    args = seen["args"]
    assert args["sampling_backend"] == "soft_gumbel"
    assert not args["disable_radix_cache"] and args["schedule_policy"] == "lpm"
    assert args["disable_overlap_schedule"]
    assert not args["disable_cuda_graph"] and not args["enable_mixed_chunk"]  # graphs on
    assert CONTROLLER_LOADER in args["custom_weight_loader"]
    # the scheduler processes' settings: what the server exported before the launch
    setup = SchedulerSetup.from_json(seen["env"])
    assert setup == server.setup and setup.soft.soft_thinking.mode == mode
    rt = runtime["rt"] = SoftRuntime(setup)
    if mode == "adaptsoft":  # the controller through the custom weight loader
        hooks.set_runtime(rt)
        try:
            hooks.load_weights(None, [(CONTROLLER_NAME, encode_controller(state))])
        finally:
            hooks.set_runtime(None)

    async def run_sglang():
        return await asyncio.gather(*(server.generate(p, dict(params, **k), r)
                                      for r, p, k in zip(rids, prompts, keys)))

    got = asyncio.run(run_sglang())
    assert tm.sent_batches > len(rids)  # records really arrived in several slices
    for g, e in zip(got, expected):
        assert g.token_ids == e.token_ids
        assert g.log_probs == e.log_probs
        assert g.stop_reason == e.stop_reason
        assert g.extra_fields["soft_trace"] == e.extra_fields["soft_trace"]
        assert g.extra_fields["soft_think_closed"] == e.extra_fields["soft_think_closed"]
        assert g.extra_fields["soft_think_closed"] == (think_end_id(eng.tokenizer) in g.token_ids)
    assert any(e.extra_fields["soft_think_closed"] for e in expected)
    assert len(server._traces) == 0  # nothing left behind


def test_verl_server_refuses_missing_records(server_factory, monkeypatch):
    """A server without the plugin (no records) fails the request clearly."""
    server, _ = server_factory("fixed")

    class PlainTM:
        async def generate_request(self, obj, request=None):
            yield {"output_ids": [5, 6], "meta_info": {"finish_reason": {"type": "length"}}}

    server.tokenizer_manager = PlainTM()
    with pytest.raises(RuntimeError, match="no soft records"):
        asyncio.run(server.generate([1, 2, 3], {"temperature": 1.0}, "r0"))


def test_update_controller_reaches_the_weight_loader(monkeypatch):
    from sglang.srt.utils import MultiprocessingSerializer

    import soft_spatial.rollout.sglang_server as mod
    from soft_spatial.softthink import AdaptSoftConfig, SoftThinkingConfig
    sent = []

    class Engine:
        async def update_weights_from_tensor(self, req):
            sent.append(req)

    adapter = object.__new__(mod.SGLangSoftServerAdapter)
    adapter.config = SimpleNamespace(tensor_model_parallel_size=1, data_parallel_size=2)
    adapter._engine = Engine()

    async def init():
        return None

    monkeypatch.setattr(adapter, "_init_server_adapter", init, raising=False)
    monkeypatch.setattr(adapter, "_is_server_tp_leader", lambda: True, raising=False)
    # on a GPU the blob moves to the device and SGLang's CUDA-IPC reductions apply; here it
    # stays a CPU tensor with torch's own (shared-memory) reductions
    import sglang.srt.utils.patch_torch as patch_torch
    monkeypatch.setattr(mod, "to_ipc_device", lambda t: t)
    monkeypatch.setattr(patch_torch, "monkey_patch_torch_reductions", lambda: None)
    ctrl = trained_controller(64, seed=9)
    asyncio.run(adapter.update_controller(ctrl.to_state()))
    (req,) = sent
    assert req.load_format == CONTROLLER_LOADER and len(req.serialized_named_tensors) == 2
    rt = SoftRuntime(SchedulerSetup(soft=SoftSettings(soft_thinking=SoftThinkingConfig(mode="adaptsoft"),
                                                      adaptsoft=AdaptSoftConfig()), hidden_size=64,
                                    think_end_id=3))
    hooks.set_runtime(rt)
    try:  # what each TP worker does with its copy
        named = MultiprocessingSerializer.deserialize(req.serialized_named_tensors[1])
        hooks.load_weights(None, named)
    finally:
        hooks.set_runtime(None)
    for k, v in ctrl.state_dict().items():
        assert torch.equal(rt.controller.state_dict()[k], v), k
