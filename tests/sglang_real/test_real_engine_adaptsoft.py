"""AdaptSoft (a trained controller sets τ per step) through SGLang 0.5.12's REAL offline engine on
the CPU (see conftest.py and test_real_engine_soft.py for what runs for real and the parity
tolerances).

* every scheduler process loads the controller checkpoint at start (evaluation);
* the controller's input is the final hidden state SGLang's forward returns
  (``CaptureHiddenMode.LAST``, asked for by the plugin), so τ, the records and the likelihoods
  equal the local engine's, text and image prompts, through the </think> switch;
* a controller update travels as one tensor through ``update_weights_from_tensor`` and the
  plugin's custom weight loader (what training does after each step) and takes effect on the
  next request.
"""
from __future__ import annotations

import pytest
from real_engine import PROMPTS, assert_parity, assert_replays

from controller_helpers import trained_controller
from soft_spatial.softthink import SamplingConfig, SoftThinkingConfig

pytestmark = pytest.mark.sglang

SOFT = SoftThinkingConfig(mode="adaptsoft", top_k=4)
SAMPLING = SamplingConfig(temperature=0.8, max_new_tokens=16)


@pytest.fixture(scope="module")
def controller(tmp_path_factory):
    path = tmp_path_factory.mktemp("ctrl") / "adaptsoft.pt"
    trained_controller(64, seed=4).save(path)
    return path


def test_adaptsoft_parity_with_local_engine(engine, reference):
    got = engine.generate(PROMPTS, soft_thinking=SOFT, sampling=SAMPLING, n=2, seed=7)
    want, ref = reference(PROMPTS, SAMPLING, n=2, seed=7)
    assert_parity(got, want, ref, "adaptsoft")
    soft_tau = [t for w in want for t, s in zip(w.trace.tau.tolist(), w.trace.soft.tolist()) if s]
    assert len(set(round(t, 4) for t in soft_tau)) > 5  # τ really varies per step
    assert any(w.think_end is not None and w.think_end + 1 < len(w.token_ids) for w in want)
    assert any(w.finish_reason == "stop" for w in want)
    assert_replays(reference.l64, PROMPTS, got, SAMPLING.temperature)


def test_controller_update_takes_effect_on_the_next_request(engine, reference, controller):
    from soft_spatial.softthink import AdaptSoft
    before = engine.generate(PROMPTS[:2], soft_thinking=SOFT, sampling=SAMPLING, seed=3)
    new = trained_controller(64, seed=8)
    state = new.to_state()
    try:
        engine.set_controller(state)  # update_weights_from_tensor + the plugin's loader
        for local in (reference.l32, reference.l64):
            local.set_controller(state)
        got = engine.generate(PROMPTS[:2], soft_thinking=SOFT, sampling=SAMPLING, seed=3)
        assert_parity(got, *reference(PROMPTS[:2], SAMPLING, seed=3), "new controller")
        assert all(not g.trace.tau[:1].equal(b.trace.tau[:1]) for g, b in zip(got, before))
    finally:
        old = AdaptSoft.load(controller)
        old_state = old.to_state()
        engine.set_controller(old_state)
        for local in (reference.l32, reference.l64):
            local.set_controller(old_state)
