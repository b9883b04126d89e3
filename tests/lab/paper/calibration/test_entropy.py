"""μ_H/σ_H of the initial policy (soft_spatial/lab/paper/calibration/entropy.py): the soft steps'
normalised entropies of sampled prompts against a direct computation from teacher-forced logits,
and their estimate. (The command, ``python -m soft_spatial.stats entropy``:
tests/lab/paper/calibration/test_cli.py.)"""
import math

import numpy as np
import pytest


def direct_entropy(logits, k, temperature):
    """Ĥ per row in float64 python: top-K of softmax(ℓ/T), renormalised, −Σ p log p / log K."""
    out = []
    for row in logits.double().tolist():
        top = sorted((x / temperature for x in row), reverse=True)[:k]
        m = top[0]
        z = sum(math.exp(x - m) for x in top)
        p = [math.exp(x - m) / z for x in top]
        out.append(-sum(q * math.log(q) for q in p if q > 0) / math.log(k))
    return np.array(out)


def test_estimate_equals_direct_computation_from_replayed_logits(tiny_qwen3_vl_small,
                                                                 train_parquet):
    from soft_spatial.engines import LocalEngine
    from soft_spatial.engines.replay import replay_completion
    from soft_spatial.softthink import SamplingConfig, SoftThinkingConfig
    from soft_spatial.lab.paper.calibration.entropy import estimate, parquet_prompts, soft_step_entropies

    prompts = parquet_prompts([train_parquet], 3, seed=1)
    assert len(prompts) == 3 and prompts[0][1]["content"][0]["type"] == "image"
    engine = LocalEngine.from_pretrained(tiny_qwen3_vl_small)
    seen = []
    real = engine.generate

    def recording(batch, **kw):
        outs = real(batch, **kw)
        seen.extend((batch[o.prompt_index], o) for o in outs)
        return outs

    engine.generate = recording
    soft_thinking = SoftThinkingConfig(mode="fixed", fixed_tau=0.5, top_k=4)
    sampling = SamplingConfig(temperature=0.8, max_new_tokens=8)
    ent = soft_step_entropies(engine, prompts, soft_thinking, sampling, samples=2, batch_prompts=2,
                              progress=False)
    direct = {}
    for prompt, o in seen:
        logits = replay_completion(engine, prompt, o, temperature=0.8)["logits"]
        h = direct_entropy(logits[o.trace.soft], 4, 0.8)
        direct.setdefault(prompts.index(prompt), []).append(h)
    assert set(ent) == set(direct) == {0, 1, 2}
    for i in ent:
        np.testing.assert_allclose(ent[i], np.concatenate(direct[i]), rtol=1e-4, atol=1e-5)
    values = np.concatenate([np.concatenate(direct[i]) for i in sorted(direct)])
    assert values.size > 20 and values.std() > 0
    est = estimate(ent, bins=10)
    assert est.entropy_mean == pytest.approx(values.mean(), abs=1e-5)
    assert est.entropy_std == pytest.approx(values.std(), abs=1e-5)
    assert sum(est.histogram_counts) == values.size == est.soft_steps
    assert est.histogram_counts == np.histogram(values, bins=10, range=(0, 1))[0].tolist()


