"""Hard (discrete) decoding and policy weight updates through SGLang 0.5.12's REAL offline engine
on the CPU, with the soft plugin loaded (see conftest.py and test_real_engine_soft.py for what
runs for real and the parity tolerances).

* hard mode: the plugin's sampler draws every token (temperature, top-k, top-p, greedy) from the
  request's own noise stream, so SGLang's tokens, records and likelihoods equal the local
  engine's;
* without soft steps a request's KV is a function of its tokens, so the radix cache keeps the
  whole request (prompt and output), unlike soft requests (test_real_engine_soft.py);
* a policy weight update by name through ``update_weights_from_tensor`` (verl's weight sync)
  reaches the model and flushes the prefix cache: the next requests decode with the new weights.
"""
from __future__ import annotations

import pytest
import torch
from real_engine import LONG, PROMPTS, assert_parity, batch_log, clear_batch_log

from soft_spatial.models import think_end_id
from soft_spatial.softthink import SamplingConfig, SoftThinkingConfig

pytestmark = pytest.mark.sglang

SOFT = SoftThinkingConfig(mode="hard", top_k=4)


@pytest.mark.parametrize("sampling", [
    SamplingConfig(temperature=0.8, max_new_tokens=16),
    SamplingConfig(temperature=0.7, top_k=20, top_p=0.9, max_new_tokens=16),
    SamplingConfig(greedy=True, max_new_tokens=16)], ids=["T0.8", "topk-topp", "greedy"])
def test_hard_parity_with_local_engine(engine, reference, sampling):
    got = engine.generate(PROMPTS, soft_thinking=SOFT, sampling=sampling, n=2, seed=7)
    want, ref = reference(PROMPTS, sampling, n=2, seed=7)
    assert_parity(got, want, ref, "hard")
    assert not any(w.trace.soft.any() for w in want)
    assert {w.finish_reason for w in want} == {"stop", "length"}
    te = think_end_id(engine.tokenizer)  # where each row closed its think block, hard mode too
    for g in got:
        assert g.think_end == (g.token_ids.index(te) if te in g.token_ids else None)
    assert any(g.think_closed for g in got)


def test_hard_requests_keep_their_whole_kv_in_the_radix_cache(engine, reference):
    """The contrast to soft requests: a follow-up whose prompt is a finished hard request's
    prompt + output matches all of it (1 token prefilled)."""
    sampling = SamplingConfig(temperature=0.8, max_new_tokens=16)
    (first,) = engine.generate([LONG], soft_thinking=SOFT, sampling=sampling, seed=21)
    m = min(4, len(first.token_ids) - 1)
    assert m >= 2
    follow = first.prompt_ids + first.token_ids[:m]
    clear_batch_log(engine)
    got = engine.generate([follow], soft_thinking=SOFT, sampling=sampling, seed=5)
    assert_parity(got, *reference([follow], sampling, seed=5), "follow-up")
    (row,) = [r for b in batch_log(engine) if b["mode"] == "EXTEND" for r in b["rows"]]
    assert row[2] == 1


def test_policy_weight_update_takes_effect(engine, reference, think_tiny):
    """New weights for a layer (changes the prompt's KV) and the output layer, by their Hugging
    Face names: SGLang decodes like the local engine with the same update, not like before, and
    the prompt cached before the update is not reused."""
    from safetensors.torch import load_file
    sampling = SamplingConfig(temperature=0.8, max_new_tokens=12)
    before = engine.generate(PROMPTS, soft_thinking=SOFT, sampling=sampling, seed=9)  # caches prompts
    original = load_file(think_tiny / "model.safetensors")
    g = torch.Generator().manual_seed(0)
    names = ["model.language_model.layers.0.mlp.down_proj.weight", "lm_head.weight"]
    update = {n: original[n] + 0.3 * torch.randn(original[n].shape, generator=g) for n in names}
    try:
        engine.update_weights(update)
        for local in (reference.l32, reference.l64):
            local.update_weights(update)
        clear_batch_log(engine)
        got = engine.generate(PROMPTS, soft_thinking=SOFT, sampling=sampling, seed=9)
        assert_parity(got, *reference(PROMPTS, sampling, seed=9), "updated")
        assert [g.token_ids for g in got] != [b.token_ids for b in before]
        prefilled = {r[0]: r[2] for b in batch_log(engine) if b["mode"] == "EXTEND"
                     for r in b["rows"]}
        assert sorted(prefilled.values()) == sorted(len(c.prompt_ids) for c in got)
    finally:  # the module's engine and references go back to the checkpoint's weights
        restore = {n: original[n] for n in names}
        engine.update_weights(restore)
        for local in (reference.l32, reference.l64):
            local.update_weights(restore)
