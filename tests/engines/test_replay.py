"""Teacher-forced replay (:mod:`soft_spatial.engines.replay`) against the embedded engine's own
decoding: each step's mixture weights bit for bit, its candidate log-probabilities and its
likelihood under the run's density (fp32, fp64, the reference density); and the bf16 replay gaps
against their closed form, with and without ``density.fp32_logits`` (docs/sglang.md, "bf16 and
the replay check").

Tiny random models from tests/conftest.py; the `</think>` logit gets a fixed bonus through a wrapped
output head (tests/support/local_engine_helpers.py), which replay uses too.
"""
import pytest
import torch

from controller_helpers import trained_controller
from local_engine_helpers import chat, check_replay, with_think_bonus
from soft_spatial.engines import LocalEngine
from soft_spatial.softthink import DensityConfig, SamplingConfig, SoftThinkingConfig


@pytest.mark.parametrize("mode", ["fixed", "adaptsoft"])
def test_replay_reproduces_every_step_fp32(engine, mode):
    eng = with_think_bonus(engine)
    eng.set_controller(trained_controller(eng.hidden_size).to_state() if mode == "adaptsoft"
                       else None)
    prompt = chat()
    outs = eng.generate([prompt], soft_thinking=SoftThinkingConfig(mode=mode),
                        sampling=SamplingConfig(max_new_tokens=40), n=3, seed=1, debug=True)
    assert any(o.think_closed for o in outs)  # both soft and discrete steps are covered
    check_replay(eng, prompt, outs, atol=1e-5)
    eng.set_controller(None)


def test_the_recorded_likelihood_is_under_the_runs_density(engine):
    """The authors' release's density (what the learning recipe trains with): the engine records
    every soft step under it, and the teacher-forced replay under it reproduces each step; the
    exact density of the same records differs (so the setting reached the record)."""
    eng = with_think_bonus(engine)
    prompt, ref = chat(), DensityConfig.reference()
    kw = dict(soft_thinking=SoftThinkingConfig(mode="fixed"),
              sampling=SamplingConfig(max_new_tokens=30), n=2, seed=3, debug=True)
    outs = eng.generate([prompt], density=ref, **kw)
    assert any(o.think_closed for o in outs)
    check_replay(eng, prompt, outs, atol=1e-5, density=ref)
    exact = eng.generate([prompt], **kw)
    for o, e in zip(outs, exact):
        assert torch.equal(o.trace.scores, e.trace.scores)  # the same decoding
        soft = o.trace.soft
        assert not torch.allclose(torch.tensor(o.logprobs)[soft], torch.tensor(e.logprobs)[soft])
        assert torch.equal(torch.tensor(o.logprobs)[~soft], torch.tensor(e.logprobs)[~soft])


def test_replay_reproduces_every_step_fp64(engine64):
    eng = with_think_bonus(engine64)
    outs = eng.generate([chat()], soft_thinking=SoftThinkingConfig(mode="fixed"),
                        sampling=SamplingConfig(max_new_tokens=30), n=2, debug=True)
    check_replay(eng, chat(), outs, atol=1e-6)  # records are fp32


# -- bf16 and the replay check (docs/sglang.md, "bf16 and the replay check") --------------------
@pytest.fixture(scope="module")
def bf16_gaps(tiny_qwen3_vl_small):
    """The same bf16 rollouts' replay gaps with the head in the model's dtype and in fp32
    (``density.fp32_logits`` on both sides), and the fp32 model's."""
    from soft_spatial.engines.replay import replay_gaps
    out = {}
    for dtype, fp32 in ((torch.bfloat16, False), (torch.bfloat16, True), (torch.float32, False)):
        eng = LocalEngine.from_pretrained(tiny_qwen3_vl_small, dtype=dtype)
        density = DensityConfig(fp32_logits=fp32)
        ids = [eng.tokenizer(t).input_ids for t in ("Which side is red? A. left B. right",
                                                     "Is the green cube left of the chair?")]
        prompts = [i[:min(map(len, ids))] for i in ids]  # one length: no padding (a bf16 rounding)
        outs = eng.generate(prompts, soft_thinking=SoftThinkingConfig(mode="fixed"),
                            sampling=SamplingConfig(max_new_tokens=32), n=2, seed=1, debug=True,
                            density=density)
        out[dtype, fp32] = replay_gaps(eng, prompts, outs, density=density)
    return out


def test_replay_gaps_follow_the_closed_form_and_vanish_in_fp32(bf16_gaps):
    """Per soft step the measured gap is Σ_k[e^{−γ_k}(e^{Δ_k} − 1) − Δ_k] of the measured Δ and
    the rollout's noise (in every arm, to fp32 rounding of the densities); Δ is ~1e-5 in fp32 and
    ~1e-2 in bf16. Step 0 (the prompt's own step) agrees to 1e-4 in fp32; in bf16 the prefill of
    the prompt and the replay's forward over prompt + response round differently (other GEMM
    shapes), by bf16 rounding."""
    for (dtype, fp32), g in bf16_gaps.items():
        assert g.soft.sum() >= 100 and g.first.sum() == 4
        torch.testing.assert_close(g.gap[g.soft], g.predicted, rtol=0, atol=2e-5)
        rms = float(g.delta.pow(2).mean().sqrt())
        assert (rms < 1e-4) if dtype == torch.float32 else (3e-3 < rms < 0.2), (dtype, fp32, rms)
        assert g.gap[g.first].abs().max() < (1e-4 if dtype == torch.float32 else 0.5)


def test_fp32_logits_take_the_heads_rounding_out_of_the_gap(bf16_gaps):
    """Without the setting, the replay's own head rounding moves its candidate log-probs by what
    rounding each candidate logit to a bf16 ulp predicts (RMS within 25%); with it, the replay's
    logits are the fp32 product (Δ_head ≈ 0), and Δ (rollout against replay, both with the
    setting) loses the part the two sides' rounding added."""
    from soft_spatial.softthink.logits import rounding_delta_var
    plain, fp32 = bf16_gaps[torch.bfloat16, False], bf16_gaps[torch.bfloat16, True]
    measured = float(plain.delta_head.pow(2).mean().sqrt())
    predicted = float(rounding_delta_var(plain.cand_logits).mean().sqrt())
    assert 0.75 < measured / predicted < 1.25, (measured, predicted)
    assert fp32.delta_head.abs().max() < 1e-6  # fp32 renormalisation only
    assert float(fp32.delta.pow(2).mean()) < float(plain.delta.pow(2).mean())
