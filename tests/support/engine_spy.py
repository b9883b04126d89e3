"""Test helper (no tests here): record what the local engine computes at every step."""


def capture_local(monkeypatch):
    """Spy on the local engine: every sample_step call (logits, hidden, record) and every
    next-step input mixture, in call order."""
    import soft_spatial.engines.local as local
    steps, mixes = [], []
    real_step, real_mix = local.sample_step, local.record_input_embeddings

    def spy_step(logits, h, u, thinking, *a, **kw):
        rec = real_step(logits, h, u, thinking, *a, **kw)
        steps.append((logits.clone(), h.clone(), {k: v.clone() for k, v in rec.present().items()}))
        return rec

    def spy_mix(*a, **kw):
        out = real_mix(*a, **kw)
        mixes.append(out.clone())
        return out

    monkeypatch.setattr(local, "sample_step", spy_step)
    monkeypatch.setattr(local, "record_input_embeddings", spy_mix)
    return steps, mixes
