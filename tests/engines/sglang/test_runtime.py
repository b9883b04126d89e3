"""The scheduler-side runtime of the SGLang soft backend (:mod:`soft_spatial.engines.sglang.runtime`)
on the CPU, without sglang installed.

* PARITY: fed the logits and hidden states the local engine saw (same seeds), it returns the local
  engine's records, tokens and next-step mixture embeddings over whole generations (soft steps,
  the </think> switch, discrete steps, rows finishing), also read the CUDA-graph way;
* each request's noise step (chunked rows, retraction, overlap, re-prefill);
* the decode-input buffers under continuous batching and at graph capture (docs/sglang.md,
  "CUDA graphs"); the records' host copies.

That the sampler never waits for the device: tests/bench/gpu/test_sampler_sync.py.
"""
from __future__ import annotations

from functools import partial
from types import SimpleNamespace

import pytest
import torch

from biased_head import BiasedHead
from controller_helpers import trained_controller
from engine_spy import capture_local
from soft_spatial.engines.local import LocalEngine
from soft_spatial.engines.sglang import SchedulerSetup
from soft_spatial.engines.sglang.client import INFO_KEYS, PARAM_KEY, info_key, request_params
from soft_spatial.engines.sglang.runtime import (STATE_ATTR, BatchContext, SoftRuntime,
                                                 SoftStateError, last_hidden)
from soft_spatial.models import think_end_id
from soft_spatial.softthink.noise import row_seed
from soft_spatial.softthink.settings import SoftSettings
from soft_spatial.softthink import SamplingConfig, SoftThinkingConfig


# -- helpers ----------------------------------------------------------------------------------
_SLOTS = iter(range(10 ** 6))


def fake_req(rid, seed, sampling):
    """The Req fields the runtime reads (SGLang 0.5.12 ``Req``); each request gets its own
    request-pool slot, in no particular order (SGLang reuses freed slots)."""
    sp = SimpleNamespace(custom_params={PARAM_KEY: request_params(seed, sampling)},
                         temperature=sampling.temperature, top_k=sampling.top_k or -1,
                         top_p=sampling.top_p)
    return SimpleNamespace(rid=rid, output_ids=[], is_chunked=0, sampling_params=sp,
                           req_pool_idx=(7 * next(_SLOTS)) % 61)


def slots(reqs):
    """``ForwardBatch.req_pool_indices`` of a batch."""
    return torch.tensor([r.req_pool_idx for r in reqs])


def run_local(engine, prompts, soft_thinking, sampling, seeds, monkeypatch):
    """Generate with the local engine, capturing every sample_step call and next-input mixture."""
    with pytest.MonkeyPatch.context() as mp:
        steps, mixes = capture_local(mp)
        outs = engine.generate(prompts, soft_thinking=soft_thinking, sampling=sampling, seeds=seeds)
    return outs, steps, mixes


def settings_for(engine, soft_thinking, seed=0):
    te = think_end_id(engine.tokenizer) if soft_thinking.is_soft else None
    return SchedulerSetup(soft=SoftSettings(soft_thinking=soft_thinking, seed=seed), hidden_size=engine.hidden_size,
                          think_end_id=te, banned_ids=engine.banned_ids.tolist())


def drive(sample, decode, engine, steps, mixes, n_rows, seeds, sampling):
    """SGLang's decode loop for the captured steps: rows leave when they emit an eos token.
    ``sample(reqs, logits, hidden) -> (tokens, info)``; ``decode(reqs, plain) -> embeds``."""
    reqs = [fake_req(f"r{i}", row_seed(seeds[i], 0), sampling) for i in range(n_rows)]
    active = list(range(n_rows))
    E = engine.embed.weight
    for t, (logits, h, rec) in enumerate(steps):
        batch = [reqs[r] for r in active]
        tokens, info = sample(batch, logits, h)
        for key in INFO_KEYS:  # records: exactly the local engine's
            got = torch.tensor(info[info_key(key)], dtype=rec[key].dtype)
            assert torch.equal(got, rec[key].cpu()), (t, key)
        assert torch.equal(tokens, rec["topk_ids"][:, 0])
        for r, tok in zip(active, tokens.tolist()):
            reqs[r].output_ids.append(tok)
        if t < len(mixes):  # next-step inputs: exactly the local engine's mixture
            plain = E[tokens]
            got = decode(batch, plain)
            got = plain if got is None else got
            assert torch.equal(got, mixes[t].to(got.dtype)), t
        active = [r for r, tok in zip(active, tokens.tolist()) if tok not in engine.eos_ids]
    return reqs


PROMPTS = [[5, 17, 42, 99, 7], [3, 8], [11, 12, 13, 14]]


@pytest.fixture
def engine(tiny_qwen3_vl_small):
    eng = LocalEngine.from_pretrained(tiny_qwen3_vl_small)
    eng.lm_head = BiasedHead(eng.lm_head, think_end_id(eng.tokenizer), 5.0)
    return eng


# -- parity with the local engine -------------------------------------------------------------
CAPTURE_BS = [1, 2, 4, 8]  # SGLang captures a list like this and pads a batch to the next size


class GraphReplay:
    """What SGLang's ``CudaGraphRunner`` does around the decode read: a static
    ``req_pool_indices`` buffer of the largest captured size, the batch's slots copied into its
    first rows (the rest keep stale slots), the read run at the padded size, the output cut back.
    The read is compiled once per size with ``fullgraph=True`` (a graph break would raise), the
    way SGLang's CPU graph runner compiles the forward per captured size."""

    def __init__(self, rt, embed, pool_rows, d):
        self.slots = torch.zeros(max(CAPTURE_BS), dtype=torch.long)
        self.plain = torch.zeros(max(CAPTURE_BS), d)
        self.compiled = {bs: torch.compile(
            lambda s, e: rt.decode_inputs(s, embed, e, pool_rows), fullgraph=True,
            backend="eager", dynamic=False) for bs in CAPTURE_BS}
        self.padded = None

    def __call__(self, reqs):
        raw = len(reqs)
        bs = next(b for b in CAPTURE_BS if b >= raw)
        self.slots[:raw] = slots(reqs)
        out = self.compiled[bs](self.slots[:bs], self.plain[:bs])
        self.padded = out[raw:]
        return out[:raw]


@pytest.mark.parametrize("mode,graphs", [("adaptsoft", False), ("fixed", False),
                                         ("hard", False), ("adaptsoft", True), ("fixed", True)])
def test_runtime_parity_with_local_engine(engine, mode, graphs, monkeypatch):
    """Records, tokens and next-step inputs equal the local engine's bit for bit; with
    ``graphs`` every decode read is done the CUDA-graph way (:class:`GraphReplay`: padded batch
    sizes 3 -> 4, 2, 1 as rows finish), padded rows finite."""
    soft_thinking = SoftThinkingConfig(mode=mode)
    sampling = SamplingConfig(temperature=1.0, max_new_tokens=14)
    seeds = [7, 8, 9]
    ctrl = trained_controller(engine.hidden_size, seed=1)
    if mode == "adaptsoft":
        engine.set_controller(ctrl)
    outs, steps, mixes = run_local(engine, PROMPTS, soft_thinking, sampling, seeds, monkeypatch)
    rt = SoftRuntime(settings_for(engine, soft_thinking))
    if mode == "adaptsoft":
        rt.set_controller(ctrl.to_state())
    read, sample = (lambda b, plain: rt.decode_inputs(slots(b), engine.embed, plain)), rt.sample
    if graphs:
        replay = GraphReplay(rt, engine.embed, 61, engine.hidden_size)
        sample = partial(rt.sample, pool_rows=61)

        def read(batch, plain):
            out = replay(batch)
            assert torch.isfinite(replay.padded).all()
            return out
    reqs = drive(sample, read, engine, steps, mixes, len(PROMPTS), seeds, sampling)
    torch._dynamo.reset()
    for o, req in zip(outs, reqs):
        assert req.output_ids == o.token_ids
    if mode != "hard":  # the </think> switch happened in the compared steps
        assert any(o.think_end is not None and o.think_end + 1 < len(o.token_ids) for o in outs)
        assert all(not rt.buffers("cpu").thinking[r.req_pool_idx] for r, o in zip(reqs, outs)
                   if o.think_end is not None)
    else:
        assert not any(rec["soft"].any() for _, _, rec in steps)


def test_runtime_chunked_rows_untouched_and_retraction_after_soft_steps_raises(engine):
    soft_thinking = SoftThinkingConfig(mode="fixed")
    rt = SoftRuntime(settings_for(engine, soft_thinking))
    sampling = SamplingConfig()
    a, b = fake_req("a", 1, sampling), fake_req("b", 2, sampling)
    b.is_chunked = 1
    logits, h = torch.randn(2, engine.lm_head.weight.shape[0]), torch.randn(2, engine.hidden_size)
    tok, info = rt.sample([a, b], logits, h)
    assert not hasattr(b, STATE_ATTR) and getattr(a, STATE_ATTR).steps == 1
    masked = logits[1].index_fill(0, engine.banned_ids, float("-inf"))
    assert info[info_key("soft")] == [True, False] and int(tok[1]) == int(masked.argmax())
    a.output_ids.append(int(tok[0]))
    a.output_ids.append(5)
    with pytest.raises(RuntimeError, match="2 output tokens after 1 sampled steps"):
        rt.sample([a], logits[:1], h[:1])  # a decode batch cannot be ahead of the noise
    a.output_ids.pop()
    rt.sample([a], logits[:1], h[:1])  # a decode step, in step
    with pytest.raises(SoftStateError, match="re-prefilled"):
        rt.sample([a], logits[:1], h[:1], extend=True)  # prefilled again after soft steps


def test_hard_requests_realign_their_noise(engine):
    """The step counter is the request's own: a decode batch may see ``output_ids`` one token
    behind it (overlap scheduling); a re-prefill (extend batch after sampling) resumes at the
    output length, dropping steps SGLang discarded."""
    soft_thinking = SoftThinkingConfig(mode="hard")
    rt = SoftRuntime(settings_for(engine, soft_thinking))
    logits = torch.randn(1, engine.lm_head.weight.shape[0])
    r1, r2 = fake_req("x", 3, SamplingConfig()), fake_req("x", 3, SamplingConfig())
    rt.sample([r1], logits, None, extend=True)
    rt.sample([r1], logits, None)  # step 1, output_ids still [] (lagging one step: overlap)
    r1.output_ids = [1]
    rt.sample([r1], logits, None)  # step 2 with the first token
    with pytest.raises(RuntimeError, match="1 output tokens after 3"):
        rt.sample([r1], logits, None)  # two steps behind: never
    r1.output_ids = [1, 2]
    r2.output_ids = [1]
    rt.sample([r2], logits, None)  # a new Req object with output: starts at step 1
    t1, i1 = rt.sample([r1], logits, None, extend=True)  # re-prefilled: back to step 2
    assert getattr(r1, STATE_ATTR).steps == 3
    r3 = fake_req("x", 3, SamplingConfig())
    r3.output_ids = [1, 2]
    t3, i3 = rt.sample([r3], logits, None)
    assert torch.equal(t1, t3) and i1 == i3


def test_last_hidden_selects_each_rows_last_position():
    h = torch.arange(10.).view(5, 2)
    ctx = BatchContext(reqs=[0, 1], is_decode=False, extend_seq_lens=[3, 2])
    assert torch.equal(last_hidden(h, ctx, 2), h[[2, 4]])
    assert last_hidden(h[:2], ctx, 2) is h[:2] or torch.equal(last_hidden(h[:2], ctx, 2), h[:2])


# -- decode-input buffers under CUDA graphs (docs/sglang.md, "CUDA graphs") --------------------
def _pool(rows):
    """A request pool as SGLang 0.5.12 lays it out: ``rows`` rows, slots 1..rows-1 handed out
    from a free list (freed slots appended, so they are reused), row 0 the padding row."""
    return SimpleNamespace(free=list(range(1, rows)), rows=rows)


@pytest.mark.parametrize("mode", ["fixed", "adaptsoft"])
def test_graph_read_under_continuous_batching(engine, mode):
    """Requests arrive and finish while others decode, their slots are reused, some rows switch
    at </think>: after every step the graph-style read of every running row equals the
    mixture its records stand for (:func:`record_input_embeddings`, computed independently from
    the streamed records), bit for bit; the buffers never move (a captured graph keeps their
    addresses), including for the pool's last slot; a row whose slot holds another request's
    record is refused on the host before the forward."""
    from soft_spatial.softthink import record_input_embeddings
    soft_thinking = SoftThinkingConfig(mode=mode, top_k=4)
    rt = SoftRuntime(settings_for(engine, soft_thinking))
    v, d = engine.lm_head.weight.shape[0], engine.hidden_size
    te = think_end_id(engine.tokenizer)
    pool = _pool(6)
    replay = GraphReplay(rt, engine.embed, pool.rows, d)
    g = torch.Generator().manual_seed(0)
    running, n_new, ptrs, switched, reused = [], 0, None, 0, set()
    for step in range(24):
        while pool.free and len(running) < 5 and step % 3 == 0:  # arrivals (their prefill)
            req = fake_req(f"c{n_new}", n_new, SamplingConfig())
            req.req_pool_idx = pool.free.pop(0)
            reused.add(req.req_pool_idx) if n_new >= 5 else None
            n_new += 1
            running.append(req)
        rt.check_decode_rows([r for r in running if r.output_ids])  # the decode rows
        logits = torch.randn(len(running), v, generator=g)
        logits[::2, te] += 4.0 * (step % 5 == 4)  # some rows leave <think>
        tokens, info = rt.sample(running, logits, torch.randn(len(running), d, generator=g),
                                 pool_rows=pool.rows)
        buf = rt.buffers("cpu", pool.rows)
        ptrs = ptrs or (buf.ids.data_ptr(), buf.weights.data_ptr())
        assert (buf.ids.data_ptr(), buf.weights.data_ptr()) == ptrs and buf.size == pool.rows
        rec = {k: torch.tensor(info[info_key(k)]) for k in ("topk_ids", "scores", "tau", "soft")}
        want = record_input_embeddings(engine.embed.weight, rec["topk_ids"], rec["scores"],
                                       rec["tau"], rec["soft"])
        assert torch.equal(replay(running), want), step
        assert torch.isfinite(replay.padded).all()
        for r, tok in zip(running, tokens.tolist()):
            r.output_ids.append(tok)
            switched += tok == te
        done = [r for i, r in enumerate(running) if (step + i) % 4 == 3]  # departures
        for r in done:
            pool.free.append(r.req_pool_idx)
        running = [r for r in running if r not in done]
    assert switched and reused and pool.rows - 1 in {r.req_pool_idx for r in running} | \
        set(pool.free)
    stranger = fake_req("stranger", 1, SamplingConfig())
    stranger.req_pool_idx = pool.free[0] if pool.free else running[0].req_pool_idx
    with pytest.raises(RuntimeError, match="no record"):
        rt.check_decode_rows([stranger])
    torch._dynamo.reset()


def test_decode_read_at_graph_capture_allocates_from_the_pool(engine):
    """SGLang captures its decode graphs at start-up, before any request: the read then has no
    buffers yet and no batch; it allocates them from the request pool's rows, reads finite
    zeros, does not raise, and traces as one graph (no host sync, no value branch). The
    sampler later writes into those very tensors — the pool's last slot included — and hard
    mode keeps SGLang's plain embeddings."""
    soft_thinking = SoftThinkingConfig(mode="fixed", top_k=4)
    rt = SoftRuntime(settings_for(engine, soft_thinking))
    d, rows = engine.hidden_size, 9
    traced = torch.compile(lambda s, e: rt.decode_inputs(s, engine.embed, e, rows),
                           fullgraph=True, backend="eager")
    out = traced(torch.zeros(4, dtype=torch.long), torch.ones(4, d))
    assert torch.equal(out, torch.zeros(4, d))
    buf = rt.buffers("cpu")
    assert buf.size == rows and buf.fixed
    ptr = buf.ids.data_ptr()
    req = fake_req("last", 3, SamplingConfig())
    req.req_pool_idx = rows - 1
    rt.sample([req], torch.randn(1, engine.lm_head.weight.shape[0]), torch.randn(1, d),
              pool_rows=rows)
    assert rt.buffers("cpu", rows).ids.data_ptr() == ptr and buf.owner[rows - 1] == "last"
    assert not torch.equal(traced(torch.tensor([rows - 1]), torch.ones(1, d)),
                           torch.zeros(1, d))
    req = fake_req("beyond", 4, SamplingConfig())
    req.req_pool_idx = rows  # beyond the pool: refused, never a reallocation
    with pytest.raises(IndexError, match="outside"):
        rt.sample([req], torch.randn(1, engine.lm_head.weight.shape[0]), torch.randn(1, d),
                  pool_rows=rows)
    hard = SoftRuntime(settings_for(engine, SoftThinkingConfig(mode="hard")))
    assert hard.decode_inputs(torch.zeros(2, dtype=torch.long), engine.embed,
                              torch.ones(2, d), rows) is None
    hard.check_decode_rows([fake_req("h", 1, SamplingConfig())])  # nothing to check
    with pytest.raises(RuntimeError, match="no record"):  # no pool and nothing sampled
        SoftRuntime(settings_for(engine, soft_thinking)).decode_inputs(
            torch.zeros(1, dtype=torch.long), engine.embed, torch.ones(1, d))
    torch._dynamo.reset()


def test_records_reach_the_host_as_python_values_on_first_read():
    """``customized_info`` columns: row i is the row's record as Python values, read once from a
    copy taken when the step was sampled (a later change of the device tensor does not leak)."""
    from soft_spatial.engines.sglang.runtime import HostRecords, RecordColumn
    scores, soft = torch.tensor([[0.5, 0.25], [1.0, 0.0]]), torch.tensor([True, False])
    host = HostRecords({"scores": scores, "soft": soft})
    scores[0, 0] = 9.0  # after the step: the copy already holds the step's values
    col, flags = RecordColumn(host, "scores"), RecordColumn(host, "soft")
    assert len(col) == 2 and col[0] == [0.5, 0.25] and col[1] == [1.0, 0.0]
    assert flags == [True, False] and flags != [True, True] and list(flags) == [True, False]
    assert torch.equal(torch.tensor(col), torch.tensor([[0.5, 0.25], [1.0, 0.0]]))
    assert "soft" in repr(flags)
