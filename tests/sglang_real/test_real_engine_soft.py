"""Fixed-τ soft thinking through SGLang 0.5.12's REAL offline engine on the CPU (see conftest.py).

What runs for real: ``Engine`` with its tokenizer manager, a spawned scheduler process and a
detokenizer process; the scheduler's batching, memory pool, radix cache and the Qwen3-VL forward
(vision tower included, ``torch_native`` attention); the plugin's sampler backend, both hooks and
the record stream. The only CPU accommodation is tests/sglang_stubs/sglang_cpu (SGLang would swap
the sampling backend for its own on a CPU device); no ``sgl_kernel`` op is called (checked).

Parity with :class:`~soft_spatial.engines.local.LocalEngine` (same weights, seeds, fp32):
tokens, stop reasons, ``</think>`` positions, soft flags and candidate ids exactly; float records
and per-step likelihoods as close as float32 rounding allows, measured against the local engine's
float64 run (:func:`real_engine.assert_parity`: soft steps amplify rounding along a sequence on
this tiny random model, by the same amount in any float32 engine); and, per step without
accumulation, the trainer's teacher-forced replay of SGLang's records reproduces its likelihoods
(:func:`real_engine.assert_replays`).
"""
from __future__ import annotations

import asyncio
from collections import defaultdict

import pytest
from real_engine import (LONG, PROMPTS, WireLog, assert_parity, assert_replays, batch_log,
                         chat, clear_batch_log)

from soft_spatial.softthink import SamplingConfig, SoftThinkingConfig

pytestmark = pytest.mark.sglang

SOFT = SoftThinkingConfig(mode="fixed", top_k=4)
SAMPLING = SamplingConfig(temperature=0.8, max_new_tokens=16)


def test_real_engine_runs_the_plugin(engine):
    info = engine.backend.get_server_info()
    assert info["sampling_backend"] == "soft_gumbel"  # kept on the CPU by the test overlay
    assert not info["disable_radix_cache"] and info["schedule_policy"] == "lpm"
    assert info["disable_overlap_schedule"] and not info["enable_torch_compile"]  # no CPU graphs
    assert info["attention_backend"] == "torch_native" and info["device"] == "cpu"
    assert "soft_spatial.engines.sglang.hooks.load_weights" in info["custom_weight_loader"]


def test_fixed_soft_parity_with_local_engine(engine, reference):
    """Text and image prompts, 2 samples each: the </think> switch, eos and length stops."""
    # seed 9: the first whose noise (docs/design.md §2.2) covers every case checked below
    got = engine.generate(PROMPTS, soft_thinking=SOFT, sampling=SAMPLING, n=2, seed=9)
    want, ref = reference(PROMPTS, SAMPLING, n=2, seed=9)
    assert_parity(got, want, ref, "fixed")
    # the cases the comparison covers
    assert any(w.think_end is not None and w.think_end + 1 < len(w.token_ids) for w in want)
    assert any(w.finish_reason == "stop" for w in want)
    assert any(w.finish_reason == "length" and w.trace.soft.all() for w in want)
    assert any(not bool(w.trace.soft[-1]) for w in want)  # discrete steps after </think>
    assert_replays(reference.l64, PROMPTS, got, SAMPLING.temperature)


def test_continuous_batching_staggered_arrivals(engine, reference):
    """Request A decodes alone; B and C (2 samples each, of different lengths) arrive while A is
    decoding and join its batch. Every row equals the local engine's row for the same prompt,
    seed and sample index, and each step's record crosses the wire once."""
    wire = WireLog(engine)
    clear_batch_log(engine)
    a_prompt, b_prompt, c_prompt = [20, 21, 22, 23, 24, 25, 26], [3, 8], PROMPTS[3]
    long = SamplingConfig(temperature=0.8, max_new_tokens=40)

    async def run():
        ta = asyncio.ensure_future(engine.generate_one(a_prompt, long, seed=13, rid="A"))
        while engine._traces.received("A") == 0:  # A has streamed its first records
            await asyncio.sleep(0.005)
        rest = [asyncio.ensure_future(engine.generate_one(p, SAMPLING, seed=s, sample_index=j,
                                                          rid=f"{name}{j}"))
                for name, p, s in (("B", b_prompt, 12), ("C", c_prompt, 13)) for j in range(2)]
        return [await ta] + list(await asyncio.gather(*rest))

    try:
        got = engine.backend.loop.run_until_complete(run())
    finally:
        wire.close()
    runs = [reference([a_prompt], long, seeds=[13]), reference([b_prompt], SAMPLING, n=2,
                                                               seeds=[12]),
            reference([c_prompt], SAMPLING, n=2, seeds=[13])]
    want, ref = [w for r in runs for w in r[0]], [x for r in runs for x in r[1]]
    assert len(want[0].token_ids) > 8  # A decodes long enough for the others to join
    assert_parity(got, want, ref, "staggered")

    # the scheduler really batched them continuously: a decode batch held A together with
    # requests that arrived later (shorter outputs)
    mixed = [b for b in batch_log(engine) if b["mode"] == "DECODE"
             and {r[0] for r in b["rows"]} >= {"A", "B0", "C1"}]
    assert mixed and any(len({r[1] for r in b["rows"]}) > 1 for b in mixed)

    # records on the wire: every slice carries exactly the steps of its new tokens, no history
    for g, rid in zip(got, ["A", "B0", "B1", "C0", "C1"]):
        slices = wire.slices[rid]
        assert sum(len(out) for out, _ in slices) == len(g.token_ids)
        tokens = []
        for out, rec in slices:
            assert all(len(v) == len(out) for v in rec.values()), rid
            tokens += rec["topk_ids"][:, 0].tolist() if rec else []
        assert tokens == g.token_ids  # the concatenated slices are the trace, once
    assert len(wire.slices["A"]) > 2  # A's records arrived in several slices


def test_radix_cache_shares_prompts_and_never_soft_kv(engine, reference):
    """Prompt KV (text and image tokens) is computed once for the 4 samples of a prompt; KV
    computed from soft inputs is never matched: a request that repeats a finished request's
    prompt and soft spine tokens recomputes those positions and decodes like the local engine."""
    engine.backend.flush_cache()
    clear_batch_log(engine)
    prompt = chat((30, 160, 40), (224, 160), "Is the green box left of the camera? A. yes B. no")
    got = engine.generate([prompt, LONG], soft_thinking=SOFT, sampling=SAMPLING, n=4, seeds=[21, 21])
    assert_parity(got, *reference([prompt, LONG], SAMPLING, n=4, seeds=[21, 21]),
                  "shared prompt")
    prefill = defaultdict(list)  # tokens prefilled per prompt, from the scheduler's batches
    for b in batch_log(engine):
        if b["mode"] == "EXTEND":
            for rid, _, n in b["rows"]:  # rid: soft-<tag>-<prompt>-<sample>[-prefill]
                prefill[int(rid.split("-")[2])].append(n)
    for i in range(2):  # per prompt group: the prompt once, then 1 token per sample
        n_prompt = len(got[4 * i].prompt_ids)
        assert sorted(prefill[i]) == [1, 1, 1, 1, n_prompt], prefill[i]
    assert len(got[0].prompt_ids) > 64  # the image's tokens were shared too

    # a follow-up whose prompt is a finished soft request's prompt + spine: no soft KV reused
    m = 4
    first = next(g for g in got[4:] if g.trace.soft[:m].all() and len(g.token_ids) > m)
    follow = first.prompt_ids + first.token_ids[:m]
    clear_batch_log(engine)
    g2 = engine.generate([follow], soft_thinking=SOFT, sampling=SAMPLING, seed=5)
    assert_parity(g2, *reference([follow], SAMPLING, seed=5), "follow-up")
    (row,) = [r for b in batch_log(engine) if b["mode"] == "EXTEND" for r in b["rows"]]
    assert row[2] == m  # prompt matched; the m spine positions were recomputed from tokens
