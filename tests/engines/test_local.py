"""The embedded engine: cache/batch/padding invariance, greedy limit, think switch, eos, images,
the controller's τ, errors, weight updates, other model families, the logits the density asks for.
(That teacher-forced replay reproduces its steps: tests/engines/test_replay.py.)

Tiny random models from tests/conftest.py. To make the random policy close its think block (or
stop) within a few steps, some tests give the `</think>` / eos logits a fixed bonus through a
wrapped output head (tests/support/local_engine_helpers.py); replay uses the same head, so every
invariant still compares like with like.
"""
import pytest
import torch

from controller_helpers import trained_controller
from local_engine_helpers import BiasedHead, chat, check_replay, with_think_bonus
from soft_spatial.engines import LocalEngine, PromptTooLongError
from soft_spatial.engines.replay import replay_completion
from soft_spatial.models import think_end_id
from soft_spatial.softthink import AdaptSoft, DensityConfig, SamplingConfig, SoftThinkingConfig


def test_cached_decoding_equals_uncached_forward_logits(engine64):
    """Decoding logits at every step (soft inputs through the KV cache) = one uncached forward."""
    eng = engine64
    captured = []
    head = eng.lm_head
    eng.lm_head = lambda h: captured.append(head(h)) or captured[-1]
    try:
        (o,) = eng.generate([chat()], soft_thinking=SoftThinkingConfig(mode="fixed"),
                            sampling=SamplingConfig(max_new_tokens=12))
    finally:
        eng.lm_head = head
    decoded = torch.cat(captured)  # one row per step
    r = replay_completion(eng, chat(), o)
    banned = eng.banned_ids  # never sampled; set to -inf in both
    torch.testing.assert_close(decoded.index_fill(-1, banned, 0), r["logits"].index_fill(
        -1, banned, 0), rtol=0, atol=1e-9)
    assert torch.isinf(r["logits"][:, banned]).all()


BATCH_PROMPTS = [
    chat(text="Short?"), [5, 9, 13, 40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50],
    chat(color=(10, 10, 220), size=(96, 64),
         text="A much longer question that makes this prompt the longest one here. "
              "Is the blue square above, below or beside the camera? A. B. C. D.")]


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_batch_equals_rows_alone_and_padding_is_invisible(tiny_qwen3_vl_small, dtype):
    """Rows decode the same alone or batched with longer (left-padded) or shorter prompts.

    In fp64 the whole trajectories agree to 1e-5. In fp32 the padding changes attention rounding
    (~1e-6), which soft decoding, a chaotic map, amplifies over steps, by how much depends on the
    CPU's BLAS kernels (2.5e-5 after 3 steps on one machine, < 1e-5 on another); there the first
    steps are held to the bound docs/sglang.md uses for two engines: |batched − alone| in fp32 ≤
    1e-5 + 4 · (each one's distance to the same rows in fp64), the fp64 runs measuring what fp32
    rounding alone does to these rows.
    """
    steps = 16 if dtype == torch.float64 else 3
    soft_thinking = SoftThinkingConfig(mode="fixed")
    sampling = SamplingConfig(max_new_tokens=steps)

    def runs(dt):
        engine = LocalEngine.from_pretrained(tiny_qwen3_vl_small, dtype=dt)
        together = engine.generate(BATCH_PROMPTS, soft_thinking=soft_thinking, sampling=sampling,
                                   n=2, seeds=[7, 8, 9])
        alone = [o for i, p in enumerate(BATCH_PROMPTS) for o in engine.generate(
            [p], soft_thinking=soft_thinking, sampling=sampling, n=2, seeds=[7 + i])]
        return together, alone

    together, alone = runs(dtype)
    assert [(o.prompt_index, o.sample_index) for o in together] == [
        (0, 0), (0, 1), (1, 0), (1, 1), (2, 0), (2, 1)]
    ref = runs(torch.float64) if dtype == torch.float32 else None
    for r, (a, b) in enumerate(zip(together, alone)):
        assert a.token_ids == b.token_ids
        assert torch.equal(a.trace.soft, b.trace.soft)
        gap = (a.trace.scores.double() - b.trace.scores.double()).abs().max().item()
        bound = 1e-5
        if ref is not None:
            own = max(((x.trace.scores.double() - y.trace.scores.double()).abs().max().item()
                      for x, y in ((a, ref[0][r]), (b, ref[1][r]))
                       if x.token_ids == y.token_ids), default=0.0)  # else no allowance
            bound += 4 * own
        assert gap <= bound, (r, gap, bound)


def test_noise_free_tiny_tau_soft_decoding_is_greedy(engine):
    engine.lm_head = engine.model.get_output_embeddings()
    greedy = engine.generate([chat()], soft_thinking=SoftThinkingConfig(mode="hard"),
                             sampling=SamplingConfig(max_new_tokens=20, greedy=True))
    soft_outs = engine.generate([chat()], soft_thinking=SoftThinkingConfig(mode="fixed", noise_scale=0.0,
                                                                         fixed_tau=1e-6),
                                sampling=SamplingConfig(max_new_tokens=20))
    assert soft_outs[0].token_ids == greedy[0].token_ids
    assert soft_outs[0].trace.soft.all() and not greedy[0].trace.soft.any()
    # with a large τ the mixture is no longer one-hot and decoding departs from greedy
    blurred = engine.generate([chat()], soft_thinking=SoftThinkingConfig(mode="fixed", noise_scale=0.0,
                                                                       fixed_tau=50.0),
                              sampling=SamplingConfig(max_new_tokens=20))
    assert blurred[0].token_ids != greedy[0].token_ids


def test_think_end_step_is_soft_and_later_steps_discrete(engine):
    eng = with_think_bonus(engine, 8.0)
    te = think_end_id(eng.tokenizer)
    outs = eng.generate([chat()], soft_thinking=SoftThinkingConfig(mode="fixed"),
                        sampling=SamplingConfig(max_new_tokens=40), n=4, seed=3)
    closed = [o for o in outs if o.think_closed]
    assert closed
    for o in closed:
        k = o.think_end
        assert o.token_ids[k] == te and te not in o.token_ids[:k]
        assert o.trace.soft[: k + 1].all() and not o.trace.soft[k + 1:].any()
        tail = o.trace[k + 1:]
        assert (tail.scores == 0).all() and (tail.topk_ids[:, 1:] == 0).all()
    eng.lm_head = eng.model.get_output_embeddings()
    never = eng.generate([chat()], soft_thinking=SoftThinkingConfig(mode="fixed"),
                         sampling=SamplingConfig(max_new_tokens=15), n=2)
    for o in never:
        assert not o.think_closed and o.trace.soft.all()
        stopped = o.token_ids[-1] in eng.eos_ids
        assert o.finish_reason == ("stop" if stopped else "length")
        assert stopped or len(o.token_ids) == 15


def test_hard_mode_records_where_the_think_block_closed(engine):
    """Hard mode records the close of the think block as the soft modes do: ``think_end`` is the
    index of the first ``</think>`` the model emitted (what evaluation's ``think_closed`` and the
    training metric ``soft/never_closed_rate`` read); a completion without one never closed."""
    te, hard = think_end_id(engine.tokenizer), SoftThinkingConfig(mode="hard")
    eng = with_think_bonus(engine, 8.0)
    closing = eng.generate([chat()], soft_thinking=hard, sampling=SamplingConfig(max_new_tokens=20),
                           n=4, seed=3)
    eng.lm_head = eng.model.get_output_embeddings()
    never = eng.generate([chat()], soft_thinking=hard, sampling=SamplingConfig(max_new_tokens=15),
                         n=2)
    for o in closing + never:
        assert o.think_end == (o.token_ids.index(te) if te in o.token_ids else None)
        assert o.think_closed == (te in o.token_ids) and not o.trace.soft.any()
    assert any(o.think_closed for o in closing) and not any(o.think_closed for o in never)


def test_eos_stops_and_is_reported(engine):
    eos = engine.eos_ids[0]
    engine.lm_head = BiasedHead(engine.model.get_output_embeddings(),
                                {think_end_id(engine.tokenizer): 8.0, eos: 10.0})
    outs = engine.generate([chat()], soft_thinking=SoftThinkingConfig(mode="fixed"),
                           sampling=SamplingConfig(max_new_tokens=60), n=3, seed=2)
    engine.lm_head = engine.model.get_output_embeddings()
    stopped = [o for o in outs if o.finish_reason == "stop"]
    assert stopped
    for o in stopped:
        assert o.token_ids[-1] in engine.eos_ids and len(o.trace) == len(o.token_ids)
        assert o.token_ids.count(o.token_ids[-1]) >= 1 and len(o.token_ids) < 60


def test_images_change_outputs_and_seeds_reproduce(engine):
    soft_thinking, sampling = SoftThinkingConfig(mode="fixed"), SamplingConfig(max_new_tokens=10)
    red = engine.generate([chat()], soft_thinking=soft_thinking, sampling=sampling, seed=5)[0]
    red2 = engine.generate([chat()], soft_thinking=soft_thinking, sampling=sampling, seed=5)[0]
    blue = engine.generate([chat(color=(0, 0, 255))], soft_thinking=soft_thinking, sampling=sampling, seed=5)[0]
    other = engine.generate([chat()], soft_thinking=soft_thinking, sampling=sampling, seed=6)[0]
    assert red.trace.equal(red2.trace) and red.token_ids == red2.token_ids
    assert not torch.allclose(red.trace.scores[0], blue.trace.scores[0])
    assert not red.trace.equal(other.trace)


def test_adaptsoft_records_the_controllers_tau(engine):
    ctrl = trained_controller(engine.hidden_size, seed=3)
    engine.set_controller(ctrl.to_state())
    outs = engine.generate([chat()], soft_thinking=SoftThinkingConfig(mode="adaptsoft"),
                           sampling=SamplingConfig(max_new_tokens=20), n=2, debug=True)
    for o in outs:
        tr = o.trace
        with torch.no_grad():
            u = engine.controller(tr.ctrl_x)
        # u recomputed from the recorded features (batched matmul: float rounding only) ...
        torch.testing.assert_close(tr.u, u, rtol=1e-6, atol=1e-6)
        # ... and the recorded τ is exactly the controller's map of the recorded u
        assert torch.equal(tr.tau, engine.controller.temperature(tr.u))
        assert tr.tau.std() > 0  # τ really varies per step
        r = replay_completion(engine, chat(), o)
        x = engine.controller.features(r["hidden"], o.debug["logp"])
        torch.testing.assert_close(x, tr.ctrl_x, rtol=1e-4, atol=1e-4)
    engine.set_controller(None)


def test_fixed_mode_records_fixed_tau_and_hard_mode_is_discrete(engine):
    fixed = engine.generate([chat()], soft_thinking=SoftThinkingConfig(mode="fixed", fixed_tau=0.3),
                            sampling=SamplingConfig(max_new_tokens=8))[0]
    assert torch.all(fixed.trace.tau == torch.tensor(0.3))
    hard = engine.generate([chat()], soft_thinking=SoftThinkingConfig(mode="hard"),
                           sampling=SamplingConfig(max_new_tokens=8))[0]
    assert not hard.trace.soft.any() and (hard.trace.scores == 0).all()


def test_prefill_once_per_prompt(engine):
    calls = []
    base = engine.base
    orig = base.forward

    def spy(*args, **kwargs):
        if kwargs.get("input_ids") is not None:
            calls.append(kwargs["input_ids"].shape[0])
        return orig(*args, **kwargs)

    base.forward = spy
    try:
        engine.generate([chat(), chat(color=(0, 255, 0))], soft_thinking=SoftThinkingConfig(mode="fixed"),
                        sampling=SamplingConfig(max_new_tokens=3), n=4)
    finally:
        del base.forward
    assert calls == [2]  # one prefill of the 2 prompts, shared by their 4 samples each


def test_clear_errors(engine, tiny_qwen3_vl_small):
    with pytest.raises(ValueError, match="image"):
        engine.generate([[5, 6, engine.image_token_id, 7]], soft_thinking=SoftThinkingConfig(mode="hard"))
    with pytest.raises(ValueError, match="image"):
        engine.generate([[{"role": "user", "content": [{"type": "image"},
                                                        {"type": "text", "text": "hi"}]}]],
                        soft_thinking=SoftThinkingConfig(mode="hard"))
    with pytest.raises(PromptTooLongError, match="prompt 1 is too long") as info:
        LocalEngine.from_pretrained(tiny_qwen3_vl_small, max_prompt_length=8).generate(
            [[5, 6], chat()], soft_thinking=SoftThinkingConfig(mode="hard"))
    assert info.value.index == 1 and info.value.limit == 8 and info.value.length > 8
    with pytest.raises(ValueError, match="single token"):
        engine.generate([chat()], soft_thinking=SoftThinkingConfig(mode="fixed", think_end="<nothink>"))
    with pytest.raises(ValueError, match="controller"):
        engine.generate([chat()], soft_thinking=SoftThinkingConfig(mode="adaptsoft"))
    with pytest.raises(FileNotFoundError):
        engine.generate([[{"role": "user", "content": [
            {"type": "image", "image": "/nonexistent.png"}]}]], soft_thinking=SoftThinkingConfig(mode="hard"))


def test_update_weights_and_set_controller(engine, tmp_path):
    soft_thinking, sampling = SoftThinkingConfig(mode="fixed"), SamplingConfig(max_new_tokens=5)
    before = engine.generate([chat()], soft_thinking=soft_thinking, sampling=sampling)[0]
    name = "lm_head.weight"
    old = engine.model.state_dict()[name].clone()
    engine.update_weights({name: old * 3})
    after = engine.generate([chat()], soft_thinking=soft_thinking, sampling=sampling)[0]
    engine.update_weights({name: old})
    assert not before.trace.equal(after.trace)
    assert engine.generate([chat()], soft_thinking=soft_thinking, sampling=sampling)[0].trace.equal(before.trace)
    with pytest.raises(KeyError):
        engine.update_weights({"nope.weight": old})
    ctrl = trained_controller(engine.hidden_size, seed=4)
    ctrl.save(tmp_path / "c.pt")
    engine.set_controller(AdaptSoft.read_checkpoint(tmp_path / "c.pt"))
    x = torch.randn(3, ctrl.feature_dim)
    assert torch.equal(engine.controller(x), ctrl(x))
    engine.set_controller(None)


@pytest.mark.parametrize("fixture", ["tiny_qwen2_5_vl", "tiny_qwen3_text_small", "tiny_qwen3_vl"])
def test_other_families_generate_and_replay(request, fixture):
    eng = LocalEngine.from_pretrained(request.getfixturevalue(fixture))
    prompt = chat() if eng.processor is not None else [
        {"role": "user", "content": "Which side is red? A. left B. right"}]
    eng.lm_head = BiasedHead(eng.model.get_output_embeddings(),
                             {think_end_id(eng.tokenizer): 8.0})
    outs = eng.generate([prompt], soft_thinking=SoftThinkingConfig(mode="fixed"),
                        sampling=SamplingConfig(max_new_tokens=12), n=2, debug=True)
    check_replay(eng, prompt, outs, atol=2e-5)


def test_bf16_decoding_runs(tiny_qwen3_vl_small):
    eng = LocalEngine.from_pretrained(tiny_qwen3_vl_small, dtype=torch.bfloat16)
    (o,) = eng.generate([chat()], soft_thinking=SoftThinkingConfig(mode="fixed"),
                        sampling=SamplingConfig(max_new_tokens=8))
    assert 1 <= len(o.token_ids) <= 8 and o.trace.scores.dtype == torch.float32
    assert (o.finish_reason == "length") == (len(o.token_ids) == 8)
    assert torch.isfinite(o.trace.scores[o.trace.soft]).all()


def test_prompt_ids_with_images_equal_the_chat_prompt(engine):
    """verl's agent loop sends rendered ids + images; decoding must equal the chat path."""
    text = engine.processor.apply_chat_template(chat(), add_generation_prompt=True,
                                                tokenize=False)
    img = chat()[0]["content"][0]["image"]
    ids = engine.processor(text=[text], images=[img], return_tensors="pt")["input_ids"][0].tolist()
    soft_thinking, sampling = SoftThinkingConfig(mode="fixed"), SamplingConfig(max_new_tokens=8)
    a = engine.generate([chat()], soft_thinking=soft_thinking, sampling=sampling, seeds=[3])[0]
    b = engine.generate([{"prompt_ids": ids, "images": [img]}], soft_thinking=soft_thinking, sampling=sampling,
                        seeds=[3])[0]
    assert a.prompt_ids == b.prompt_ids and a.trace.equal(b.trace)
    short = list(ids)
    short.remove(engine.image_token_id)  # one placeholder too few for the image
    with pytest.raises(ValueError, match="placeholder"):
        engine.generate([{"prompt_ids": short, "images": [img]}], soft_thinking=soft_thinking)


# -- bf16 (docs/sglang.md, "bf16 and the replay check") -------------------------------------
@pytest.mark.parametrize("fp32", [False, True])
def test_the_engine_samples_from_the_logits_the_setting_asks_for(tiny_qwen3_vl_small, monkeypatch,
                                                               fp32):
    """``density.fp32_logits`` reaches the embedded engine's sampler: every step's logits (prefill
    and decode) are the fp32 product of the bf16 hidden state and head (never-emittable ids at
    −inf), or the bf16 head's own output without it."""
    import soft_spatial.engines.local as local
    from soft_spatial.softthink.logits import fp32_linear
    eng = LocalEngine.from_pretrained(tiny_qwen3_vl_small, dtype=torch.bfloat16)
    seen, sample = [], local.sample_step
    monkeypatch.setattr(local, "sample_step", lambda logits, h, *a, **k: (
        seen.append((logits, h)), sample(logits, h, *a, **k))[1])
    eng.generate([eng.tokenizer("Which side is red?").input_ids],
                 soft_thinking=SoftThinkingConfig(mode="fixed"),
                 sampling=SamplingConfig(max_new_tokens=3), n=2,
                 density=DensityConfig(fp32_logits=fp32))
    assert len(seen) == 3
    for logits, h in seen:
        assert h.dtype == torch.bfloat16
        with torch.no_grad():
            exact, plain = (x.index_fill(-1, eng.banned_ids, float("-inf"))
                            for x in (fp32_linear(eng.lm_head, h), eng.lm_head(h)))
        assert logits.dtype == (torch.float32 if fp32 else torch.bfloat16)
        # (the prefill's logits are computed before its rows are repeated for the samples: fp32
        # GEMMs of another shape round differently, by ~1e-7)
        torch.testing.assert_close(logits.float(), (exact if fp32 else plain).float(),
                                   rtol=0, atol=1e-5)
        assert (logits.float() - (plain if fp32 else exact)).abs().nan_to_num().max() > 1e-3
