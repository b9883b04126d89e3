"""The SGLang plugin against SGLang 0.5.12's REAL classes, on the CPU (see conftest.py).

What runs for real: ``hooks.install()`` (version check, ``register_sampler_backend``,
``HookRegistry`` patches of ``TpModelWorker.forward_batch_generation`` and
``Qwen3LLMModel.forward``), SGLang's ``create_sampler`` building ``SoftGumbelSampler`` (real
``Sampler.__init__`` with a gloo TP group), its ``forward`` with a real ``LogitsProcessorOutput``
and ``SamplingBatchInfo`` (parity with :func:`soft_spatial.engines.step.sample_step`, including a
row past ``</think>``), the patched ``TpModelWorker.forward_batch_generation`` wrapper, and the
real ``ServerArgs`` with :func:`required_server_args`. Not run: scheduler, KV cache, model forward.
"""
from __future__ import annotations

import copy
import inspect
import socket
from pathlib import Path
from types import SimpleNamespace

import pytest

import sglang  # noqa: F401  (collected only where it imports: conftest.py)
import torch

from soft_spatial.engines.sglang import SchedulerSetup, required_server_args
from soft_spatial.engines.sglang.client import (CONTROLLER_NAME, PARAM_KEY, encode_controller,
                                                request_params)
from soft_spatial.engines.sglang.records import RECORD_KEY, step_records
from soft_spatial.softthink.trace import TRACE_KEYS
from soft_spatial.engines.sglang.runtime import BatchContext, batch_context
from soft_spatial.engines.step import sample_step
from soft_spatial.softthink.settings import SoftSettings
from soft_spatial.softthink import (AdaptSoftConfig, DensityConfig, SamplingConfig,
                                    SoftThinkingConfig, noise_uniforms, seed_tensor)

pytestmark = pytest.mark.sglang

HIDDEN = 64


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def model_dir(tiny_qwen3_vl_small):
    """Tiny Qwen3-VL (small vocabulary): (dir, think_end_id, vocab)."""
    from transformers import AutoConfig, AutoTokenizer

    from soft_spatial.models import think_end_id
    cfg = AutoConfig.from_pretrained(tiny_qwen3_vl_small)
    assert cfg.text_config.hidden_size == HIDDEN
    tok = AutoTokenizer.from_pretrained(tiny_qwen3_vl_small)
    return Path(tiny_qwen3_vl_small), think_end_id(tok), cfg.text_config.vocab_size


@pytest.fixture(scope="module")
def sgl(model_dir):
    """Process-wide SGLang setup (server args, gloo world of 1, model parallel groups)."""
    from sglang.srt.distributed import parallel_state as ps
    from sglang.srt.server_args import ServerArgs, set_global_server_args_for_scheduler
    path, think_end, vocab = model_dir
    server_args = ServerArgs(model_path=str(path), device="cpu")
    set_global_server_args_for_scheduler(server_args)
    if not ps.model_parallel_is_initialized():
        ps.init_distributed_environment(backend="gloo", world_size=1, rank=0, local_rank=0,
                                        distributed_init_method=f"tcp://127.0.0.1:{_free_port()}")
        ps.initialize_model_parallel(1)
    return SimpleNamespace(server_args=server_args, path=path, think_end=think_end, vocab=vocab)


def _settings(think_end, banned=()):
    return SchedulerSetup(soft=SoftSettings(soft_thinking=SoftThinkingConfig(mode="adaptsoft", top_k=4),
                                            adaptsoft=AdaptSoftConfig()), hidden_size=HIDDEN,
                          think_end_id=think_end, banned_ids=list(banned))


def _random_controller(seed=3):
    from controller_helpers import trained_controller
    return trained_controller(HIDDEN, seed=seed).float().eval()


@pytest.fixture(scope="module")
def installed(sgl):
    """``install()`` against real sglang, once per process (hooks cannot be undone)."""
    import soft_spatial.engines.sglang as plugin
    from soft_spatial.engines.sglang import hooks
    rt = plugin.install(_settings(sgl.think_end, banned=[sgl.vocab - 1]))
    yield SimpleNamespace(hooks=hooks, rt=rt)
    hooks.set_runtime(None)


class FakeReq:
    """The Req fields the plugin reads (sglang 0.5.12 ``Req``), carrying ``custom_params``."""

    def __init__(self, rid, seed, sampling, slot=0):
        self.rid, self.output_ids, self.is_chunked, self.req_pool_idx = rid, [], 0, slot
        self.sampling_params = SimpleNamespace(
            custom_params={PARAM_KEY: request_params(seed, sampling)},
            temperature=sampling.temperature, top_k=sampling.top_k or -1, top_p=sampling.top_p)


def _sampling_info(b, vocab):
    from sglang.srt.sampling.sampling_batch_info import SamplingBatchInfo
    return SamplingBatchInfo(
        temperatures=torch.ones(b, 1), top_ps=torch.ones(b),
        top_ks=torch.full((b,), 1 << 30, dtype=torch.int32), min_ps=torch.zeros(b),
        is_all_greedy=False, need_top_p_sampling=False, need_top_k_sampling=False,
        need_min_p_sampling=False, vocab_size=vocab, device="cpu")


# -- install -----------------------------------------------------------------------------------
def test_install_against_real_sglang(installed):
    from sglang.srt.layers import sampler as sgl_sampler
    from sglang.srt.managers import tp_worker
    from sglang.srt.models import qwen3_vl
    from sglang.srt.plugins.hook_registry import HookRegistry
    hooks = installed.hooks
    assert sglang.__version__ == "0.5.12"
    assert hooks.SAMPLER_BACKEND == "soft_gumbel"
    from sglang.srt.server_args import SAMPLING_BACKEND_CHOICES
    assert "soft_gumbel" in SAMPLING_BACKEND_CHOICES  # --sampling-backend accepts it
    assert sgl_sampler._CUSTOM_SAMPLER_FACTORIES["soft_gumbel"] is hooks.SoftGumbelSampler
    sampler = sgl_sampler.create_sampler("soft_gumbel")  # SGLang's own factory path
    assert isinstance(sampler, hooks.SoftGumbelSampler)
    assert isinstance(sampler, sgl_sampler.Sampler)
    assert hasattr(tp_worker.TpModelWorker.forward_batch_generation, "__wrapped__")
    assert hasattr(qwen3_vl.Qwen3LLMModel.forward, "__wrapped__")
    assert {hooks.TP_TARGET, hooks.EMBED_TARGET} <= HookRegistry._patched
    # idempotent: a second install neither re-registers nor re-wraps
    fn = tp_worker.TpModelWorker.forward_batch_generation
    assert hooks.install() is installed.rt
    assert tp_worker.TpModelWorker.forward_batch_generation is fn
    assert not hasattr(fn.__wrapped__, "__wrapped__")


def test_controller_weight_loader(installed):
    ctrl = _random_controller()
    seen = []
    model = SimpleNamespace(load_weights=lambda w: seen.extend(n for n, _ in w))
    blob = encode_controller(ctrl.to_state())
    installed.hooks.load_weights(model, [(CONTROLLER_NAME, blob), ("lm_head.weight",
                                                                     torch.zeros(2, 2))])
    assert seen == ["lm_head.weight"]
    got = installed.rt.controller.state_dict()
    assert all(torch.equal(got[n], v) for n, v in ctrl.state_dict().items())


# -- the real sampler ------------------------------------------------------------------------------
@pytest.mark.parametrize("density", [DensityConfig(), DensityConfig.reference()], ids=["exact", "reference"])
def test_real_sampler_parity_with_sample_step(installed, sgl, density, monkeypatch):
    """Three requests, three steps through the registered backend's real ``forward``: records and
    tokens equal ``sample_step`` on the same logits, hidden states and per-request noise. Row 1
    emits </think> at step 0, so from step 1 on it samples discretely. At step 2 the hidden states
    were captured for the plugin only (forced by the TP hook): the sampler drops them after use.
    The soft steps' likelihoods are under the run's density (the exact one and the authors'
    release's, which the learning recipe trains with): what the actor replays with."""
    from sglang.srt.layers.logits_processor import LogitsProcessorOutput
    from sglang.srt.layers.sampler import create_sampler
    ctrl = _random_controller()
    installed.hooks.load_weights(None, [(CONTROLLER_NAME, encode_controller(
        ctrl.to_state()))])
    rt = installed.rt
    monkeypatch.setattr(rt.setup.soft, "density", density)
    soft, k, v, te = rt.setup.soft.soft_thinking, rt.setup.soft.soft_thinking.top_k, sgl.vocab, sgl.think_end
    banned = torch.tensor(rt.setup.banned_ids)
    sampling = SamplingConfig(temperature=1.0)
    seeds = [11, 12, 13]
    reqs = [FakeReq(f"r{i}", s, sampling, slot=5 - i) for i, s in enumerate(seeds)]
    thinking = torch.ones(3, dtype=torch.bool)
    sampler = create_sampler("soft_gumbel")
    g = torch.Generator().manual_seed(0)
    for t in range(3):
        logits = torch.randn(3, v, generator=g) * 2
        if t == 0:
            logits[1, te] += 50.0  # row 1's spine emits </think> now
        hidden = torch.randn(3, HIDDEN, generator=g)
        out = LogitsProcessorOutput(next_token_logits=logits.clone(), hidden_states=hidden)
        forced = t == 2  # the TP hook asked for the hidden states for the controller only
        with batch_context(BatchContext(reqs=reqs, is_decode=t > 0, forced_capture=forced,
                                        slots=torch.tensor([r.req_pool_idx for r in reqs]))):
            tokens = sampler(out, _sampling_info(3, v), True, [0, 0, 0], [None] * 3, None)
        u = noise_uniforms(seed_tensor(seeds), t, k + 1)  # docs/design.md §2.2
        masked = logits.index_fill(-1, banned, float("-inf"))
        rec = sample_step(masked, hidden, u, thinking.clone(), soft, sampling, rt.controller,
                          rt.feature_dim, density=density).present()
        exact = sample_step(masked, hidden, u, thinking.clone(), soft, sampling, rt.controller,
                            rt.feature_dim).loglik
        assert torch.equal(rec["loglik"] == exact, ~rec["soft"] | density.exact)
        got = step_records(out.customized_info[RECORD_KEY])
        assert set(out.customized_info) == {RECORD_KEY}  # one key per step
        for key in (*TRACE_KEYS, "loglik"):
            assert torch.equal(got[key], rec[key]), (t, key)
        assert got["step"].tolist() == [t] * 3
        assert torch.equal(tokens, rec["topk_ids"][:, 0]), t
        assert out.next_token_logprobs is not None and out.next_token_logprobs.shape == (3,)
        assert torch.isfinite(out.next_token_logprobs).all()
        # kept where the model asked for them, dropped where only the plugin did
        assert out.hidden_states is (None if forced else hidden)
        if t == 0:
            assert int(tokens[1]) == te
        for r, tok in zip(reqs, tokens.tolist()):
            r.output_ids.append(tok)
        thinking &= tokens != te
    assert not thinking[1] and thinking[0] and thinking[2]
    assert step_records(out.customized_info[RECORD_KEY])["soft"].tolist() == [True, False, True]
    assert all(int(t) not in banned.tolist() for r in reqs for t in r.output_ids)


def test_real_sampler_outside_batch_context_raises(installed, sgl):
    from sglang.srt.layers.logits_processor import LogitsProcessorOutput
    from sglang.srt.layers.sampler import create_sampler
    sampler = create_sampler("soft_gumbel")
    out = LogitsProcessorOutput(next_token_logits=torch.zeros(1, sgl.vocab))
    with pytest.raises(RuntimeError, match="outside"):
        sampler(out, _sampling_info(1, sgl.vocab), False, [0], [None], None)


def test_tp_hook_through_real_hook_wrapper(installed, sgl):
    """SGLang's own AROUND wrapper (``hook_registry._wrap_fn``, what patched the real
    ``TpModelWorker.forward_batch_generation``) around a stand-in body: the hook publishes the
    batch's reqs and request-pool slots and forces CaptureHiddenMode.LAST; the real patched
    method wraps ``_tp_hook``."""
    from sglang.srt.managers.schedule_batch import ModelWorkerBatch
    from sglang.srt.managers.tp_worker import TpModelWorker
    from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode, ForwardMode
    from sglang.srt.plugins.hook_registry import HookType, _wrap_fn
    from soft_spatial.engines.sglang.runtime import current_batch
    assert "reqs" in ModelWorkerBatch.__dataclass_fields__
    assert "capture_hidden_mode" in ModelWorkerBatch.__dataclass_fields__
    seen = {}

    def body(self, model_worker_batch, forward_batch=None, pp_proxy_tensors=None,
             is_verify=False, skip_attn_backend_init=False):
        seen["ctx"] = current_batch()
        seen["mode"] = getattr(model_worker_batch, "capture_hidden_mode", None)
        return "result"

    wrapped = _wrap_fn(body, installed.hooks._tp_hook, HookType.AROUND)
    reqs = [FakeReq("a", 1, SamplingConfig(), slot=5)]
    slots = torch.tensor([5])
    for mode, cap, forced in ((ForwardMode.DECODE, CaptureHiddenMode.NULL, True),
                              (ForwardMode.EXTEND, CaptureHiddenMode.FULL, False)):
        mwb = SimpleNamespace(reqs=reqs, forward_mode=mode, capture_hidden_mode=cap,
                              extend_seq_lens=None if mode.is_decode() else [3],
                              req_pool_indices=slots)
        assert wrapped(object(), mwb) == "result"
        assert seen["ctx"].reqs is reqs and seen["ctx"].is_decode == mode.is_decode()
        assert seen["ctx"].slots is slots  # the batch's device slots, no pass over its rows
        assert seen["ctx"].forced_capture is forced
        assert seen["mode"] == (CaptureHiddenMode.LAST if forced else cap)
        assert current_batch() is None
    assert wrapped(object(), None) == "result" and seen["ctx"] is None  # idle batches pass
    assert TpModelWorker.forward_batch_generation.__wrapped__ is not None


# -- server args -----------------------------------------------------------------------------------
def test_real_server_args_accept_required_args(installed, sgl):
    from sglang.srt.server_args import ServerArgs
    kw = required_server_args({"mem_fraction_static": 0.4})
    args = ServerArgs(model_path=str(sgl.path), device="cpu", **kw)
    assert args.disable_overlap_schedule and not args.enable_mixed_chunk
    assert not args.disable_cuda_graph  # CUDA graphs stay on (the soft read runs inside them)
    assert not args.disable_radix_cache and args.schedule_policy == "lpm"  # prefix cache kept
    assert "soft_spatial.engines.sglang.hooks.load_weights" in args.custom_weight_loader
    # SGLang forces the pytorch sampler on CPU devices (ServerArgs._handle_cpu_backends; the test
    # overlay's sglang_cpu plugin undoes it in processes where SGLang loaded its plugins): the
    # plugin must refuse such a server instead of silently decoding without soft records.
    reset = copy.copy(args)
    reset.sampling_backend = "soft_gumbel"
    handle = ServerArgs._handle_cpu_backends
    getattr(handle, "__wrapped__", handle)(reset)  # SGLang's own method
    assert reset.sampling_backend == "pytorch"
    with pytest.raises(RuntimeError, match="sampling_backend"):
        installed.hooks.check_server_args(reset)
    args.sampling_backend = "soft_gumbel"  # what a GPU server keeps
    installed.hooks.check_server_args(args)
    # density.fp32_logits reaches SGLang's own server argument, and every scheduler refuses
    # arguments that disagree with its settings
    setup = SchedulerSetup(soft=SoftSettings(density=DensityConfig(fp32_logits=True)),
                           hidden_size=16, think_end_id=3)
    fp32 = ServerArgs(model_path=str(sgl.path), device="cpu",
                      **required_server_args({"mem_fraction_static": 0.4}, fp32_logits=True))
    fp32.sampling_backend = "soft_gumbel"
    assert fp32.enable_fp32_lm_head and not args.enable_fp32_lm_head
    installed.hooks.check_server_args(fp32, setup)
    with pytest.raises(RuntimeError, match=r"enable_fp32_lm_head=False \(the soft settings' "
                                           r"density.fp32_logits is True"):
        installed.hooks.check_server_args(args, setup)
    hidden = copy.copy(args)  # SGLang's final arguments are checked again in every scheduler
    hidden.enable_return_hidden_states = True
    with pytest.raises(RuntimeError, match=r"enable_return_hidden_states=True \(SGLang then "
                                           r"holds its CUDA graphs at every position"):
        installed.hooks.check_server_args(hidden)
    with pytest.raises(ValueError):
        required_server_args({"enable_deterministic_inference": True})
    with pytest.raises(ValueError):
        required_server_args({"rl_on_policy_target": "fsdp"})


# -- decode-input hook ---------------------------------------------------------------------------
def test_embed_hook_with_real_embedding_and_signature(installed, sgl):
    """``_embed_hook`` through SGLang's BEFORE wrapper around a body with the real (unpatched)
    ``Qwen3LLMModel.forward`` signature, with SGLang's real ``VocabParallelEmbedding`` as
    ``embed_tokens``: after a real sampler step, read from the decode-input buffers by the
    batch's request-pool slots, soft rows get Σ softmax(z/τ)_k E[ids_k] (the local engine's
    :func:`record_input_embeddings`), the discrete row exactly its plain embedding; prefill
    batches are left alone; outside a batch (graph capture/replay) the read is the same, and
    slots never written read finite zeros."""
    from sglang.srt.layers.logits_processor import LogitsProcessorOutput
    from sglang.srt.layers.sampler import create_sampler
    from sglang.srt.layers.vocab_parallel_embedding import VocabParallelEmbedding
    from sglang.srt.model_executor.forward_batch_info import ForwardMode
    from sglang.srt.models.qwen3_vl import Qwen3LLMModel
    from sglang.srt.plugins.hook_registry import HookType, _wrap_fn
    from soft_spatial.softthink import record_input_embeddings
    real_forward = Qwen3LLMModel.forward.__wrapped__
    params = list(inspect.signature(real_forward).parameters)
    assert params[:5] == ["self", "input_ids", "positions", "forward_batch", "input_embeds"]
    v, te = sgl.vocab, sgl.think_end
    embed = VocabParallelEmbedding(v, HIDDEN, params_dtype=torch.float32)
    with torch.no_grad():
        embed.weight.copy_(torch.randn(embed.weight.shape, generator=torch.Generator()
                                       .manual_seed(5)))
    def body(self, input_ids, positions, forward_batch, input_embeds=None,
             pp_proxy_tensors=None, input_deepstack_embeds=None):
        return input_embeds

    assert list(inspect.signature(body).parameters) == params  # the real signature
    fwd = _wrap_fn(body, installed.hooks._embed_hook, HookType.BEFORE)
    lm = SimpleNamespace(embed_tokens=embed)
    reqs = [FakeReq(f"e{i}", 100 + i, SamplingConfig(), slot=(4 * i + 1) % 7) for i in range(3)]
    g = torch.Generator().manual_seed(9)
    sampler = create_sampler("soft_gumbel")
    for t in range(2):  # step 0: row 1 emits </think> (a soft step); step 1: row 1 discrete
        logits = torch.randn(3, v, generator=g)
        if t == 0:
            logits[1, te] += 50.0
        out = LogitsProcessorOutput(next_token_logits=logits,
                                    hidden_states=torch.randn(3, HIDDEN, generator=g))
        with batch_context(BatchContext(reqs=reqs, is_decode=t > 0)):
            tokens = sampler(out, _sampling_info(3, v), False, [0] * 3, [None] * 3, None)
        for r, tok in zip(reqs, tokens.tolist()):
            r.output_ids.append(tok)
    info = out.customized_info
    rec = step_records(info[RECORD_KEY])
    assert rec["soft"].tolist() == [True, False, True] and reqs[1].output_ids[0] == te
    plain = embed(tokens)
    pool = SimpleNamespace(req_to_token=torch.zeros(8, 1))  # a request pool of 8 rows
    fb_decode = SimpleNamespace(forward_mode=ForwardMode.DECODE, req_to_token_pool=pool,
                                req_pool_indices=torch.tensor([r.req_pool_idx for r in reqs]))
    with batch_context(BatchContext(reqs=reqs, is_decode=True)):
        got = fwd(lm, tokens, None, fb_decode, plain)  # positional, as the VL model calls it
        got_kw = fwd(lm, input_ids=tokens, positions=None, forward_batch=fb_decode,
                     input_embeds=plain)
    want = record_input_embeddings(embed.weight[:v], rec["topk_ids"], rec["scores"], rec["tau"],
                                   rec["soft"])
    assert torch.allclose(got, want, atol=1e-6) and torch.equal(got, got_kw)
    assert torch.equal(got[1], plain[1]) and not torch.allclose(got[0], plain[0])
    with batch_context(BatchContext(reqs=reqs, is_decode=False)):  # prefill: untouched
        assert fwd(lm, tokens, None, SimpleNamespace(forward_mode=ForwardMode.EXTEND),
                   plain) is plain
    # outside a scheduler batch (CUDA-graph capture and replay): the same read, no batch state
    assert torch.equal(fwd(lm, tokens, None, fb_decode, plain), got)
    unwritten = SimpleNamespace(forward_mode=ForwardMode.DECODE, req_to_token_pool=pool,
                                req_pool_indices=torch.tensor([6, 0, 3]))
    assert 6 not in fb_decode.req_pool_indices.tolist()
    pad = fwd(lm, tokens, None, unwritten, plain)  # padded graph rows: finite, discarded
    assert torch.isfinite(pad).all() and torch.equal(pad[:2], torch.zeros(2, HIDDEN))


def test_embed_hook_at_graph_capture_then_sampler_then_padded_replay(installed, sgl):
    """The decode forward as SGLang's ``CudaGraphRunner`` runs it: first at start-up capture
    (``capture_one_batch_size``: no scheduler batch, no buffers yet, ``req_pool_indices`` all 0
    = the real ``ReqToTokenPool``'s padding row), then replayed with the batch's slots copied
    into the static index buffer and the rest padding. Through SGLang's real hook wrappers:
    the capture-time read allocates from the pool's rows, reads finite zeros and raises
    nothing, and the hooked forward traces as ONE graph (``fullgraph``: no host sync, no
    branch on values, nothing read from the batch context); the real sampler, published by
    the real ``_tp_hook`` with the worker's pool, writes into those same tensors — the pool's
    last slot (= its size) included — and the padded replay reads exactly the mixtures the
    records stand for (:func:`record_input_embeddings`)."""
    from sglang.srt.layers.logits_processor import LogitsProcessorOutput
    from sglang.srt.layers.sampler import create_sampler
    from sglang.srt.layers.vocab_parallel_embedding import VocabParallelEmbedding
    from sglang.srt.mem_cache.memory_pool import ReqToTokenPool
    from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode, ForwardMode
    from sglang.srt.models.qwen3_vl import Qwen3LLMModel
    from sglang.srt.plugins.hook_registry import HookType, _wrap_fn
    from soft_spatial.engines.sglang.runtime import SoftRuntime
    from soft_spatial.softthink import record_input_embeddings
    hooks, v = installed.hooks, sgl.vocab
    rt = SoftRuntime(_settings(sgl.think_end))
    rt.set_controller(_random_controller().to_state())
    hooks.set_runtime(rt)
    try:
        embed = VocabParallelEmbedding(v, HIDDEN, params_dtype=torch.float32)
        with torch.no_grad():
            embed.weight.copy_(torch.randn(embed.weight.shape,
                                           generator=torch.Generator().manual_seed(2)))
        lm = SimpleNamespace(embed_tokens=embed)

        def body(self, input_ids, positions, forward_batch, input_embeds=None,
                 pp_proxy_tensors=None, input_deepstack_embeds=None):
            return input_embeds * 1.0

        assert list(inspect.signature(body).parameters) == \
            list(inspect.signature(Qwen3LLMModel.forward.__wrapped__).parameters)
        fwd = _wrap_fn(body, hooks._embed_hook, HookType.BEFORE)
        pool = ReqToTokenPool(size=4, max_context_len=16, device="cpu",
                              enable_memory_saver=False)
        index = torch.zeros(8, dtype=torch.long)  # the runner's static req_pool_indices

        def graph_batch(bs):
            return SimpleNamespace(forward_mode=ForwardMode.DECODE, req_pool_indices=index[:bs],
                                   req_to_token_pool=pool)

        captured = torch.compile(fwd, fullgraph=True, backend="eager", dynamic=False)
        fb4 = graph_batch(4)
        out = captured(lm, index[:4], None, fb4, torch.ones(4, HIDDEN))  # start-up capture
        assert torch.equal(out, torch.zeros(4, HIDDEN))
        buf = rt.slot_table("cpu")
        ptrs = (buf.ids.data_ptr(), buf.weights.data_ptr())
        assert buf.size == pool.size + 1
        reqs = [FakeReq(f"p{i}", 40 + i, SamplingConfig(), slot=None) for i in range(3)]
        for r, slot in zip(reqs, pool.alloc(reqs)):
            r.req_pool_idx = slot
        reqs = reqs[::-1]  # slots 3, 2, 1 ...
        extra = FakeReq("p3", 43, SamplingConfig(), slot=None)
        extra.req_pool_idx, = pool.alloc([extra])
        assert extra.req_pool_idx == pool.size  # the last slot
        reqs.append(extra)
        worker = SimpleNamespace(model_runner=SimpleNamespace(req_to_token_pool=pool))
        sampler, g, info = create_sampler("soft_gumbel"), torch.Generator().manual_seed(4), {}

        def step(self, model_worker_batch, **kw):  # stand-in forward: a graph replay + sampler
            b = len(model_worker_batch.reqs)
            if model_worker_batch.forward_mode.is_decode():
                index[:b] = torch.tensor([r.req_pool_idx for r in model_worker_batch.reqs])
                got = captured(lm, index[:4], None, fb4, torch.ones(4, HIDDEN))[:b]
                info["read"] = got
            logits = torch.randn(b, v, generator=g)
            out = LogitsProcessorOutput(next_token_logits=logits,
                                        hidden_states=torch.randn(b, HIDDEN, generator=g))
            tokens = sampler(out, _sampling_info(b, v), False, [0] * b, [None] * b, None)
            info["rec"] = step_records(out.customized_info[RECORD_KEY])
            return tokens

        forward = _wrap_fn(step, hooks._tp_hook, HookType.AROUND)
        prev = {}
        for t in range(4):  # a prefill (extend) step, then decode steps with 3 = 4 - 1 rows
            live = reqs if t == 0 else reqs[:3]
            mode = ForwardMode.EXTEND if t == 0 else ForwardMode.DECODE
            mwb = SimpleNamespace(reqs=live, forward_mode=mode, extend_seq_lens=None,
                                  capture_hidden_mode=CaptureHiddenMode.NULL,
                                  req_pool_indices=torch.tensor([r.req_pool_idx for r in live]))
            if t:
                want = record_input_embeddings(embed.weight[:v], *[
                    prev[k][:3] for k in ("topk_ids", "scores", "tau", "soft")])
            tokens = forward(worker, mwb)
            assert (rt.slot_table("cpu").ids.data_ptr(), buf.weights.data_ptr()) == ptrs
            if t:
                assert torch.equal(info["read"], want), t
            prev = info["rec"]
            for r, tok in zip(live, tokens.tolist()):
                r.output_ids.append(tok)
        assert bool(prev["soft"].any())
    finally:
        hooks.set_runtime(installed.rt)
        torch._dynamo.reset()


def test_scheduler_internals_the_plugin_relies_on():
    """Upgrade guard for compat.sglang.protect_soft_kv / request_pool_rows / _embed_hook and
    plugin_schedulers (the real-engine tests exercise them; this names what moved)."""
    import dataclasses

    from sglang.srt.managers.schedule_batch import Req
    from sglang.srt.managers.tp_worker import TpModelWorker
    from sglang.srt.mem_cache import common
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch
    from sglang.srt.model_executor.model_runner import ModelRunner
    from sglang.srt.plugins import load_plugins
    for fn in (common.release_kv_cache, common.maybe_cache_unfinished_req):
        assert "skip_radix_cache_insert" in inspect.getsource(fn), fn.__name__
    assert "skip_radix_cache_insert" in inspect.getsource(Req.__init__)
    assert "req_pool_idx" in inspect.getsource(Req.__init__)
    assert "req_pool_indices" in {f.name for f in dataclasses.fields(ForwardBatch)}
    assert "self.model_runner" in inspect.getsource(TpModelWorker)
    assert "self.req_to_token_pool" in inspect.getsource(ModelRunner) or \
        "req_to_token_pool" in inspect.getsource(__import__(
            "sglang.srt.model_executor.model_runner_kv_cache_mixin", fromlist=["x"]))
    assert callable(load_plugins)


def test_soft_kv_protection_is_decided_when_sglang_inserts():
    """compat.sglang.protect_soft_kv through SGLang's real insertion paths: set when the request
    is first sampled (as the runtime does), it still lets the prompt in when the prefill's result is processed
    later (overlap scheduling), and keeps out KV computed from a soft input."""
    from types import SimpleNamespace

    from sglang.srt.mem_cache import common

    from soft_spatial.compat.sglang import protect_soft_kv
    from soft_spatial.engines.sglang.runtime import RequestState
    from soft_spatial.softthink import SamplingConfig

    inserted = []
    tree = SimpleNamespace(cache_unfinished_req=lambda req, **kw: inserted.append(
        len(req.output_ids)))
    req = SimpleNamespace(output_ids=[], skip_radix_cache_insert=False)
    st = RequestState(1, SamplingConfig(), thinking=True)  # its first step soft: the prefill's
    protect_soft_kv(req, lambda: st.soft_kv(len(req.output_ids)))
    protect_soft_kv(req, lambda: True)  # idempotent: the first decision stands
    req.output_ids.append(7)  # the prefill's result, processed after decode 1 was launched
    common.maybe_cache_unfinished_req(req, tree)
    req.output_ids.append(8)  # decode 1's input was step 0's mixture
    common.maybe_cache_unfinished_req(req, tree)
    assert inserted == [1]
    hard = SimpleNamespace(output_ids=[1, 2, 3], skip_radix_cache_insert=True)  # SGLang's own flag
    protect_soft_kv(hard, lambda: False)
    common.maybe_cache_unfinished_req(hard, tree)
    assert inserted == [1]
