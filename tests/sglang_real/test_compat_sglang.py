"""Fails loudly when SGLang 0.5.12 (or verl's SGLang rollout) moves an internal soft_spatial
touches: every function of soft_spatial/compat/sglang/ and the SGLang-side functions of
soft_spatial/compat/verl/, checked against the real modules.

    PYTHONPATH=.venv/sglang-cpu-overlay:tests/sglang_stubs .venv/bin/python -m pytest \
        tests/sglang_real/test_compat_sglang.py
"""
import pytest


def test_sglang_internals_we_touch_are_unchanged():
    from soft_spatial.compat import sglang

    assert sglang.check_internals() == []


def test_verl_sglang_rollout_internals_we_touch_are_unchanged():
    from soft_spatial.compat.verl.checks import check_sglang_internals

    assert check_sglang_internals() == []


def test_check_internals_names_a_moved_sampler_method(monkeypatch):
    from sglang.srt.layers.sampler import Sampler

    from soft_spatial.compat import sglang

    monkeypatch.delattr(Sampler, "_sync_token_ids_across_tp")
    assert any("Sampler._sync_token_ids_across_tp" in p for p in sglang.check_internals())


def test_check_internals_names_a_changed_overlap_loop(monkeypatch):
    """An event loop that processes batch t-1 before launching batch t breaks what the plugin
    relies on under overlap scheduling (docs/sglang.md, "Overlap scheduling")."""
    from sglang.srt.managers.scheduler import Scheduler

    from soft_spatial.compat import sglang

    def event_loop_overlap(self):  # results first, then the launch
        pop_and_process()  # noqa: F821
        batch_result = self.run_batch(batch)  # noqa: F821,F841

    monkeypatch.setattr(Scheduler, "event_loop_overlap", event_loop_overlap)
    assert any("event_loop_overlap no longer launches" in p for p in sglang.check_internals())


def test_tensor_update_request_round_trips():
    """The request carries one serialized copy per TP worker that deserializes to the tensors."""
    import torch
    from sglang.srt.utils import MultiprocessingSerializer

    from soft_spatial.compat.sglang import tensor_update_request

    named = [("w", torch.arange(6, dtype=torch.uint8))]
    req = tensor_update_request(named, copies=2, load_format="a.b", flush_cache=False)
    assert (req.load_format, req.flush_cache, len(req.serialized_named_tensors)) == ("a.b", False, 2)
    for blob in req.serialized_named_tensors:
        (name, tensor), = MultiprocessingSerializer.deserialize(blob)
        assert name == "w" and torch.equal(tensor, named[0][1])


def test_version_check_rejects_another_version(monkeypatch):
    import sglang as sgl

    from soft_spatial.compat import sglang

    monkeypatch.setattr(sgl, "__version__", "0.0.1")
    with pytest.raises(ImportError, match="0.5.12"):
        sglang.check_version()


def test_request_pool_rows_cover_every_slot_sglang_hands_out():
    """``request_pool_rows`` sizes the static decode-input buffers: every slot SGLang's real
    ``ReqToTokenPool`` allocates (1..size; row 0 pads CUDA-graph batches) indexes them, so the
    sampler never has to reallocate buffers a captured graph reads. Fails if SGLang's slot
    numbering or the pool's table moves."""
    from types import SimpleNamespace

    from sglang.srt.mem_cache.memory_pool import ReqToTokenPool

    from soft_spatial.compat.sglang import (forward_batch_request_pool, request_pool_rows,
                                            worker_request_pool)

    pool = ReqToTokenPool(size=4, max_context_len=8, device="cpu", enable_memory_saver=False)
    reqs = [SimpleNamespace(req_pool_idx=None, is_chunked=0, kv_committed_len=0)
            for _ in range(4)]
    slots = pool.alloc(reqs)
    rows = request_pool_rows(pool)
    assert max(slots) == pool.size and rows == pool.size + 1 and 0 not in slots
    pool.free(reqs[-1])
    assert pool.alloc([SimpleNamespace(req_pool_idx=None, is_chunked=0,
                                       kv_committed_len=0)]) == [pool.size]  # reused, < rows
    worker = SimpleNamespace(model_runner=SimpleNamespace(req_to_token_pool=pool))
    assert worker_request_pool(worker) is pool
    assert forward_batch_request_pool(SimpleNamespace(req_to_token_pool=pool)) is pool
    assert request_pool_rows(None) is None and worker_request_pool(object()) is None


def test_check_internals_names_a_changed_graph_runner(monkeypatch):
    """The CUDA-graph facts soft decoding relies on are checked (``_graph_problems``): a graph
    runner that stopped refreshing its static ``req_pool_indices`` is named."""
    from sglang.srt.model_executor import cuda_graph_runner as cgr

    from soft_spatial.compat import sglang

    def populate_from_forward_batch(self, *, forward_batch, raw_bs, **kw):
        pass

    monkeypatch.setattr(cgr.DecodeInputBuffers, "populate_from_forward_batch",
                        populate_from_forward_batch)
    problems = sglang.check_internals()
    assert any("populate_from_forward_batch" in p and "req_pool_indices" in p
               for p in problems), problems


def test_sglangs_fp32_head_computes_what_the_trainer_computes(monkeypatch):
    """SGLang's own ``LogitsProcessor._compute_lm_head``: with ``enable_fp32_lm_head`` (what
    ``density.fp32_logits`` sets) its logits are the fp32 product of the bf16 hidden state and
    head, the same numbers as the actor's and the embedded engine's fp32 head
    (``softthink.logits.fp32_linear``); without it, the bf16 product."""
    from types import SimpleNamespace

    import torch
    from sglang.srt.layers import logits_processor as lp

    from soft_spatial.softthink.logits import fp32_linear

    torch.manual_seed(0)
    head = SimpleNamespace(weight=(torch.randn(300, 64) * 0.5).bfloat16())
    h = torch.randn(5, 64).bfloat16()
    proc = object.__new__(lp.LogitsProcessor)
    proc.use_fp32_lm_head = True
    got = lp.LogitsProcessor._compute_lm_head(proc, h, head)
    ours = fp32_linear(head, h)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, ours, rtol=0, atol=1e-5)
    proc.use_fp32_lm_head = False
    monkeypatch.setattr(lp, "get_global_server_args",
                        lambda: SimpleNamespace(rl_on_policy_target=None))
    plain = lp.LogitsProcessor._compute_lm_head(proc, h, head)
    assert plain.dtype == torch.bfloat16 and (plain.float() - ours).abs().max() > 1e-2
