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

from types import SimpleNamespace

import pytest
import torch

from biased_head import BiasedHead
from controller_helpers import trained_controller
from engine_spy import capture_local
from soft_spatial.engines.local import LocalEngine
from soft_spatial.engines.sglang import SchedulerSetup
from soft_spatial.engines.sglang.client import PARAM_KEY, request_params
from soft_spatial.engines.sglang.records import RECORD_KEY, step_records
from soft_spatial.engines.sglang.runtime import (STATE_ATTR, BatchContext, SoftRuntime,
                                                 SoftStateError, last_hidden)
from soft_spatial.softthink.trace import TRACE_KEYS
from soft_spatial.models import think_end_id
from soft_spatial.softthink.noise import row_seed
from soft_spatial.softthink.settings import SoftSettings
from soft_spatial.softthink import AdaptSoft, SamplingConfig, SoftThinkingConfig


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
    """SGLang's decode loop for the captured steps: the first is the prefill (an extend batch),
    the others decode batches handed their slots; rows leave when they emit an eos token.
    ``sample(reqs, logits, hidden, extend, slots) -> (tokens, info)``;
    ``decode(reqs, plain) -> embeds``."""
    reqs = [fake_req(f"r{i}", row_seed(seeds[i], 0), sampling) for i in range(n_rows)]
    active = list(range(n_rows))
    E = engine.embed.weight
    for t, (logits, h, rec) in enumerate(steps):
        batch = [reqs[r] for r in active]
        tokens, info = sample(batch, logits, h, t == 0, slots(batch))
        got = step_records(info[RECORD_KEY])
        for key in (*TRACE_KEYS, "loglik"):  # records: exactly the local engine's
            assert torch.equal(got[key], rec[key].cpu()), (t, key)
        assert got["step"].tolist() == [t] * len(batch)
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
        if out is None:  # hard mode: SGLang's plain embeddings
            self.padded = torch.zeros(0)
            return None
        self.padded = out[raw:]
        return out[:raw]


@pytest.mark.parametrize("mode,graphs", [("adaptsoft", None), ("fixed", None), ("hard", None),
                                         ("adaptsoft", "read"), ("fixed", "both"),
                                         ("hard", "both")])
def test_runtime_parity_with_local_engine(engine, mode, graphs, monkeypatch):
    """Records, tokens and next-step inputs equal the local engine's bit for bit; every decode
    step after the prefill through the decode path (slots on the device); with ``graphs``
    every decode read done the CUDA-graph way (:class:`GraphReplay`: padded batch sizes
    3 -> 4, 2, 1 as rows finish), padded rows finite, and with "both" every decode step
    through the sampler's static (graph) path padded to CAPTURE_BS too. (AdaptSoft's
    controller on a padded batch rounds like a batched matmul of that size: its graph path
    against the eager one is the next test.)"""
    soft_thinking = SoftThinkingConfig(mode=mode)
    sampling = SamplingConfig(temperature=1.0, max_new_tokens=14)
    seeds = [7, 8, 9]
    ctrl = trained_controller(engine.hidden_size, seed=1)
    if mode == "adaptsoft":
        engine.set_controller(ctrl.to_state())
    outs, steps, mixes = run_local(engine, PROMPTS, soft_thinking, sampling, seeds, monkeypatch)
    rt = SoftRuntime(settings_for(engine, soft_thinking))
    if mode == "adaptsoft":
        rt.set_controller(ctrl.to_state())
    read = lambda b, plain: rt.decode_inputs(slots(b), engine.embed, plain)  # noqa: E731
    if graphs:
        if graphs == "both":
            rt.use_graphs(CAPTURE_BS, capture=False)
        replay = GraphReplay(rt, engine.embed, 61, engine.hidden_size)

        def read(batch, plain):
            out = replay(batch)
            assert torch.isfinite(replay.padded).all()
            return out

    def sample(batch, logits, h, extend, s):
        return rt.sample(batch, logits, h, pool_rows=61, extend=extend,
                         slots=None if extend else s)

    reqs = drive(sample, read, engine, steps, mixes, len(PROMPTS), seeds, sampling)
    torch._dynamo.reset()
    decodes = len(steps) - 1
    assert rt.stats == {"extend": 1, "graphed" if graphs == "both" else "eager": decodes}
    for o, req in zip(outs, reqs):
        assert req.output_ids == o.token_ids
    if mode != "hard":  # the </think> switch happened in the compared steps
        assert any(o.think_end is not None and o.think_end + 1 < len(o.token_ids) for o in outs)
        assert all(not rt.slot_table("cpu").thinking[r.req_pool_idx] for r, o in zip(reqs, outs)
                   if o.think_end is not None)
    else:
        assert not any(rec["soft"].any() for _, _, rec in steps)


@pytest.mark.parametrize("mode", ["hard", "fixed", "adaptsoft"])
def test_graph_path_equals_the_eager_step_row_for_row(engine, mode):
    """The sampler's static-buffer path (what a CUDA graph captures and replays) gives the eager
    device path's records, tokens and slot state bit for bit (AdaptSoft's controller output to
    fp32 rounding: a padded batch is a matmul of another size), for every batch size up to the
    largest graph (padded rows on the padding slot 0, which no request holds); above it the
    step runs eagerly (counted)."""
    soft_thinking = SoftThinkingConfig(mode=mode, top_k=4)
    v, d = engine.lm_head.weight.shape[0], engine.hidden_size
    ctrl = trained_controller(d, seed=2)
    runtimes = []
    for graphs in (False, True):
        rt = SoftRuntime(settings_for(engine, soft_thinking))
        rt.device_path = True  # the eager step a GPU runs
        if mode == "adaptsoft":
            rt.set_controller(ctrl.to_state())
        if graphs:
            rt.use_graphs(CAPTURE_BS, capture=False)
        runtimes.append(rt)
    g = torch.Generator().manual_seed(3)
    reqs = [[fake_req(f"g{i}", i, SamplingConfig()) for i in range(10)] for _ in runtimes]
    for own in reqs:
        for i, r in enumerate(own):
            r.req_pool_idx = i + 1
    logits, h = torch.randn(10, v, generator=g), torch.randn(10, d, generator=g)
    for rt, own in zip(runtimes, reqs):  # every request's prefill, on the host path
        rt.sample(own, logits, h, pool_rows=12, extend=True)
    for rows in (3, 8, 1, 10, 4):
        logits, h = torch.randn(rows, v, generator=g), torch.randn(rows, d, generator=g)
        logits[::3, think_end_id(engine.tokenizer)] += 6.0  # some rows leave <think>
        outs = []
        for rt, own in zip(runtimes, reqs):
            batch = own[:rows]
            tokens, info = rt.sample(batch, logits.clone(), h, pool_rows=12, slots=slots(batch))
            outs.append((tokens, step_records(info[RECORD_KEY])))
        (t0, r0), (t1, r1) = outs
        assert torch.equal(t0, t1)
        for k in r0:
            if mode == "adaptsoft" and k in ("ctrl_x", "u", "tau", "loglik"):  # fp32 rounding
                torch.testing.assert_close(r0[k], r1[k], rtol=1e-6, atol=1e-6)
            else:
                assert torch.equal(r0[k], r1[k]), (rows, k)
    eager, graphed = (rt.slot_table("cpu") for rt in runtimes)
    for name, col in eager.columns().items():  # every request's slot; row 0 is padding's
        torch.testing.assert_close(col[1:], graphed.columns()[name][1:], rtol=1e-6, atol=1e-6)
        assert mode == "adaptsoft" or torch.equal(col[1:], graphed.columns()[name][1:])
    assert runtimes[1].stats == {"extend": 1, "graphed": 4, "large": 1}


def test_the_device_step_traces_as_one_graph(engine):
    """The decode step's tensor work (noise, sample_step on the device path, next state, pack)
    traces as one graph with no break, and gives the eager step's outputs: nothing in it reads
    the device on the host or branches on a value."""
    soft_thinking = SoftThinkingConfig(mode="adaptsoft", top_k=4)
    v, d = engine.lm_head.weight.shape[0], engine.hidden_size
    rts = [SoftRuntime(settings_for(engine, soft_thinking)) for _ in range(2)]
    picky = SamplingConfig(temperature=0.7, top_k=20, top_p=0.9)
    reqs = [fake_req(f"t{i}", i, picky) for i in range(4)]
    g = torch.Generator().manual_seed(5)
    logits, h = torch.randn(4, v, generator=g), torch.randn(4, d, generator=g)
    for rt in rts:
        rt.set_controller(trained_controller(d, seed=4).to_state())
        for r in reqs:
            r.__dict__.pop(STATE_ATTR, None)
        rt.sample(reqs, logits, h, pool_rows=70, extend=True)
    s = slots(reqs)
    sampling = getattr(reqs[0], STATE_ATTR).sampling
    traced = torch.compile(lambda lg, hh, ss: rts[0]._body(lg, hh, ss, rts[0].slot_table("cpu"),
                                                           sampling, own_path=False),
                           fullgraph=True, backend="eager")
    got = traced(logits, h, s)
    want = rts[1]._body(logits, h, s, rts[1].slot_table("cpu"), sampling, own_path=False)
    torch._dynamo.reset()
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


def test_runtime_chunked_rows_untouched_and_retraction_after_soft_steps_raises(engine):
    """A chunked row samples nothing (argmax token, an all-zero record, no state); a request's
    noise steps run 0, 1, ... from its prefill on; prefilled again after soft steps it is
    refused."""
    soft_thinking = SoftThinkingConfig(mode="fixed")
    rt = SoftRuntime(settings_for(engine, soft_thinking))
    sampling = SamplingConfig()
    a, b = fake_req("a", 1, sampling), fake_req("b", 2, sampling)
    b.is_chunked = 1
    logits, h = torch.randn(2, engine.lm_head.weight.shape[0]), torch.randn(2, engine.hidden_size)
    tok, info = rt.sample([a, b], logits, h, extend=True)
    rec = step_records(info[RECORD_KEY])
    assert not hasattr(b, STATE_ATTR) and int(rt.slot_table("cpu").step[a.req_pool_idx]) == 1
    masked = logits[1].index_fill(0, engine.banned_ids, float("-inf"))
    assert rec["soft"].tolist() == [True, False] and int(tok[1]) == int(masked.argmax())
    assert not info[RECORD_KEY][1].strip(b"\0")  # the chunked row's record: all zero
    a.output_ids.append(int(tok[0]))
    _, info = rt.sample([a], logits[:1], h[:1], slots=slots([a]))  # a decode step
    assert step_records(info[RECORD_KEY])["step"].tolist() == [1]
    with pytest.raises(SoftStateError, match="re-prefilled"):
        rt.sample([a], logits[:1], h[:1], extend=True)  # prefilled again after soft steps


def test_a_slot_read_with_another_requests_state_fails_when_the_request_ends(engine):
    """The records carry the noise step each row was drawn at; a request whose slot another
    request took over (what the per-step host check used to catch) ends with records out of
    step, and the server refuses them naming the request."""
    from soft_spatial.engines.sglang.client import split_records
    from soft_spatial.engines.sglang.records import RecordsError
    rt = SoftRuntime(settings_for(engine, SoftThinkingConfig(mode="fixed")))
    v = engine.lm_head.weight.shape[0]
    a, stranger = fake_req("a", 1, SamplingConfig()), fake_req("s", 2, SamplingConfig())
    stranger.req_pool_idx = a.req_pool_idx
    rows = []
    for t in range(4):
        if t == 2:
            rt.sample([stranger], torch.randn(1, v), None, extend=True)  # takes a's slot
        _, info = rt.sample([a], torch.randn(1, v), None, extend=t == 0,
                            slots=None if t == 0 else slots([a]))
        rows.append(info[RECORD_KEY][0])
    assert split_records(rows[:2], 2, "a")[0]["soft"] == [True, True]
    with pytest.raises(RecordsError, match="request a: record 2 was sampled at noise step 1"):
        split_records(rows, 4, "a")


def test_hard_requests_realign_their_noise(engine):
    """The step counter is the request's own, on the device: it runs on through decode steps
    whatever ``output_ids`` shows (one token behind under overlap scheduling); a re-prefill
    (extend batch after sampling) resumes at the output length, dropping steps SGLang
    discarded, and draws what a request started there draws; a new Req object that arrives
    with output starts at its output length."""
    soft_thinking = SoftThinkingConfig(mode="hard")
    rt = SoftRuntime(settings_for(engine, soft_thinking))
    logits = torch.randn(1, engine.lm_head.weight.shape[0])
    r1, r2 = fake_req("x", 3, SamplingConfig()), fake_req("x", 3, SamplingConfig())
    steps = []
    for t in range(3):
        _, info = rt.sample([r1], logits, None, extend=t == 0, slots=slots([r1]))
        steps += step_records(info[RECORD_KEY])["step"].tolist()
    assert steps == [0, 1, 2]
    r2.output_ids = [1]
    _, info = rt.sample([r2], logits, None)  # a new Req object with output: starts at step 1
    assert step_records(info[RECORD_KEY])["step"].tolist() == [1]
    r1.output_ids = [1, 2]
    t1, i1 = rt.sample([r1], logits, None, extend=True)  # re-prefilled: back to step 2
    assert int(rt.slot_table("cpu").step[r1.req_pool_idx]) == 3
    r3 = fake_req("x", 3, SamplingConfig())
    r3.output_ids = [1, 2]
    t3, i3 = rt.sample([r3], logits, None, extend=True)
    assert torch.equal(t1, t3) and list(i1[RECORD_KEY]) == list(i3[RECORD_KEY])
    assert step_records(i3[RECORD_KEY])["step"].tolist() == [2]


def test_decode_batches_of_two_sampling_settings_take_the_host_path_until_one_is_left(engine):
    """The running requests' settings are learned when they start and when SGLang frees their
    slot (:meth:`SoftRuntime.release`): a decode batch mixing two settings is sampled per
    setting (counted "mixed"), each row as it would be alone; once the other setting's
    requests left, decode batches take the device path again."""
    rt = SoftRuntime(settings_for(engine, SoftThinkingConfig(mode="fixed")))
    alone = SoftRuntime(settings_for(engine, SoftThinkingConfig(mode="fixed")))
    v = engine.lm_head.weight.shape[0]
    plain, picky = SamplingConfig(), SamplingConfig(temperature=0.6, top_k=7, top_p=0.8)
    reqs = [fake_req(f"m{i}", i, plain if i % 2 else picky) for i in range(4)]
    twins = [fake_req(f"m{i}", i, plain if i % 2 else picky) for i in range(4)]
    for t, r in zip(twins, reqs):
        t.req_pool_idx = r.req_pool_idx
    g = torch.Generator().manual_seed(1)
    logits = torch.randn(4, v, generator=g)
    rt.sample(reqs, logits, None, extend=True)
    for i in range(4):
        alone.sample([twins[i]], logits[i:i + 1], None, extend=True)
    logits = torch.randn(4, v, generator=g)
    tok, info = rt.sample(reqs, logits, None, slots=slots(reqs))
    for i in range(4):  # each row as it would be alone
        t1, i1 = alone.sample([twins[i]], logits[i:i + 1], None, slots=slots([twins[i]]))
        assert int(tok[i]) == int(t1[0]) and info[RECORD_KEY][i] == i1[RECORD_KEY][0]
    for r in reqs[::2]:
        rt.release(r)  # the picky requests finished
    rt.sample(reqs[1::2], torch.randn(2, v, generator=g), None, slots=slots(reqs[1::2]))
    assert rt.stats == {"extend": 1, "mixed": 1, "eager": 1}


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
    """Requests arrive (their prefill: an extend batch) and finish while others decode (decode
    batches: the device path), their slots are reused, some rows switch at </think>: after
    every step the graph-style read of every running row equals the mixture its records stand
    for (:func:`record_input_embeddings`, computed independently from the streamed records),
    bit for bit; the table never moves (a captured graph keeps its addresses), including for
    the pool's last slot; every request's records, read back as the server reads them, run
    through its noise steps in order."""
    from soft_spatial.engines.sglang.client import split_records
    from soft_spatial.softthink import record_input_embeddings
    soft_thinking = SoftThinkingConfig(mode=mode, top_k=4)
    rt = SoftRuntime(settings_for(engine, soft_thinking))
    if mode == "adaptsoft":
        rt.set_controller(trained_controller(engine.hidden_size, seed=6).to_state())
    v, d = engine.lm_head.weight.shape[0], engine.hidden_size
    te = think_end_id(engine.tokenizer)
    pool = _pool(6)
    replay = GraphReplay(rt, engine.embed, pool.rows, d)
    g = torch.Generator().manual_seed(0)
    running, n_new, ptrs, switched, reused, streamed = [], 0, None, 0, set(), {}
    for step in range(24):
        arrivals = []
        while pool.free and len(running) + len(arrivals) < 5 and step % 3 == 0:
            req = fake_req(f"c{n_new}", n_new, SamplingConfig())
            req.req_pool_idx = pool.free.pop(0)
            reused.add(req.req_pool_idx) if n_new >= 5 else None
            n_new += 1
            arrivals.append(req)
        for batch, extend in ((arrivals, True), (running, False)):
            if not batch:
                continue
            logits = torch.randn(len(batch), v, generator=g)
            logits[::2, te] += 4.0 * (step % 5 == 4)  # some rows leave <think>
            tokens, info = rt.sample(batch, logits, torch.randn(len(batch), d, generator=g),
                                     pool_rows=pool.rows, extend=extend,
                                     slots=None if extend else slots(batch))
            table = rt.slot_table("cpu", pool.rows)
            ptrs = ptrs or (table.ids.data_ptr(), table.weights.data_ptr())
            assert (table.ids.data_ptr(), table.weights.data_ptr()) == ptrs
            assert table.size == pool.rows
            rec = step_records(info[RECORD_KEY])
            want = record_input_embeddings(engine.embed.weight, rec["topk_ids"], rec["scores"],
                                           rec["tau"], rec["soft"])
            assert torch.equal(replay(batch), want), step
            assert torch.isfinite(replay.padded).all()
            for i, (r, tok) in enumerate(zip(batch, tokens.tolist())):
                r.output_ids.append(tok)
                streamed.setdefault(r.rid, []).append(info[RECORD_KEY][i])
                switched += tok == te
        running += arrivals
        done = [r for i, r in enumerate(running) if (step + i) % 4 == 3]  # departures
        for r in done:
            rt.release(r)
            pool.free.append(r.req_pool_idx)
        running = [r for r in running if r not in done]
    assert switched and reused and pool.rows - 1 in {r.req_pool_idx for r in running} | \
        set(pool.free)
    for rid, rows in streamed.items():
        split_records(rows, len(rows), rid)  # steps 0, 1, 2, ...: the server accepts them
    assert rt.stats["eager"] > 10 and "mixed" not in rt.stats
    torch._dynamo.reset()


def test_decode_read_at_graph_capture_allocates_from_the_pool(engine):
    """SGLang captures its decode graphs at start-up, before any request: the read then has no
    slot table yet and no batch; it allocates it from the request pool's rows, reads finite
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
    table = rt.slot_table("cpu")
    assert table.size == rows and table.fixed
    ptr = table.ids.data_ptr()
    req = fake_req("last", 3, SamplingConfig())
    req.req_pool_idx = rows - 1
    rt.sample([req], torch.randn(1, engine.lm_head.weight.shape[0]), torch.randn(1, d),
              pool_rows=rows, extend=True)
    assert rt.slot_table("cpu", rows).ids.data_ptr() == ptr and int(table.step[rows - 1]) == 1
    assert not torch.equal(traced(torch.tensor([rows - 1]), torch.ones(1, d)),
                           torch.zeros(1, d))
    req = fake_req("beyond", 4, SamplingConfig())
    req.req_pool_idx = rows  # beyond the pool: refused, never a reallocation
    with pytest.raises(IndexError, match="outside"):
        rt.sample([req], torch.randn(1, engine.lm_head.weight.shape[0]), torch.randn(1, d),
                  pool_rows=rows, extend=True)
    hard = SoftRuntime(settings_for(engine, SoftThinkingConfig(mode="hard")))
    assert hard.decode_inputs(torch.zeros(2, dtype=torch.long), engine.embed,
                              torch.ones(2, d), rows) is None
    with pytest.raises(RuntimeError, match="no record"):  # no pool and nothing sampled
        SoftRuntime(settings_for(engine, soft_thinking)).decode_inputs(
            torch.zeros(1, dtype=torch.long), engine.embed, torch.ones(1, d))
    torch._dynamo.reset()


def test_a_controller_update_keeps_the_graphs_and_a_new_controller_recaptures(engine):
    """A training step's controller update loads its weights in place: the captured steps read
    them by address and stay; a controller of another shape is a new module: every graph goes,
    and the next step of each size captures again, with the new weights."""
    from soft_spatial.softthink import AdaptSoftConfig
    rt = SoftRuntime(settings_for(engine, SoftThinkingConfig(mode="adaptsoft", top_k=4)))
    d, v = engine.hidden_size, engine.lm_head.weight.shape[0]
    rt.set_controller(trained_controller(d, seed=1).to_state())
    rt.use_graphs(CAPTURE_BS, capture=False)
    reqs = [fake_req(f"u{i}", i, SamplingConfig()) for i in range(3)]
    g = torch.Generator().manual_seed(8)
    rt.sample(reqs, torch.randn(3, v, generator=g), torch.randn(3, d, generator=g),
              pool_rows=61, extend=True)

    def step():
        return rt.sample(reqs, torch.randn(3, v, generator=g), torch.randn(3, d, generator=g),
                         pool_rows=61, slots=slots(reqs))

    step()
    graphs = dict(rt.graphs._graphs)
    update = trained_controller(d, seed=1)
    with torch.no_grad():
        for p in update.parameters():
            p.add_(0.25)
    rt.set_controller(update.to_state())  # a training step's update: loaded in place
    assert rt.graphs._graphs == graphs
    assert torch.equal(rt.controller.fc1.weight, update.fc1.weight)
    step()
    wide = AdaptSoft(d, AdaptSoftConfig(width=48))
    rt.set_controller(wide.to_state())  # another shape: a new module
    assert rt.graphs._graphs == {} and rt.controller.width == 48
    step()
    assert len(rt.graphs._graphs) == 1 and rt.stats["graphed"] == 3
