"""soft_spatial.integration.collate: a batch's records collated into trace_* tensors beside verl's
responses, the spine check (a record whose spine is not the response token raises, naming the
sample), the rollout metrics."""
import numpy as np
import pytest
import torch

from soft_spatial.integration.collate import SpineMismatchError, attach_traces


def _batch(responses, traces):
    from verl import DataProto
    n, r = responses.shape
    mask = torch.zeros(n, r, dtype=torch.long)
    for i, t in enumerate(traces):
        mask[i, : len(t["topk_ids"])] = 1
    arr = np.empty(n, dtype=object)
    arr[:] = traces
    return DataProto.from_dict(tensors={"responses": responses, "response_mask": mask},
                               non_tensors={"soft_trace": arr, "uid": np.array(["a", "b"])})


def _trace(tokens, k=3):
    n = len(tokens)
    return {"topk_ids": [[t] + [t + 1] * (k - 1) for t in tokens], "scores": [[0.5] * k] * n,
            "tau": [0.5] * n, "u": [0.0] * n, "ctrl_x": [[0.0] * 9] * n,
            "entropy": [0.3] * n, "soft": [True] * n}


def test_attach_traces_collates_and_a_corrupted_record_raises():
    responses = torch.tensor([[5, 6, 7, 0], [8, 9, 0, 0]])
    batch = _batch(responses, [_trace([5, 6, 7]), _trace([8, 9])])
    metrics = attach_traces(batch)
    assert batch.batch["trace_topk_ids"].shape == (2, 4, 3)
    assert batch.batch["trace_mask"].sum().item() == 5
    assert metrics["soft/tau_mean"] == pytest.approx(0.5)
    bad = _trace([8, 9])
    bad["topk_ids"][1][0] = 42  # the record claims a spine the response does not contain
    with pytest.raises(SpineMismatchError, match=r"sample 1 \(uid b\): record 1 has spine 42"):
        attach_traces(_batch(responses, [_trace([5, 6, 7]), bad]))


def test_mixture_metrics_against_the_weights_written_out():
    """soft/top_weight_mean and soft/eff_k_mean over the soft steps (w = softmax(z/τ), float64
    by hand), overall and where Ĥ > 0.3; discrete steps do not count."""
    import math

    from soft_spatial.integration.collate import HIGH_ENTROPY, trace_metrics
    from soft_spatial.softthink import SoftTrace, StepRecord

    g = torch.Generator().manual_seed(0)
    traces = []
    for n in (5, 3):
        tr = StepRecord.zeros(n, 4, 9).record_fields()
        tr["scores"] = torch.randn(n, 4, generator=g) * 2
        tr["tau"] = 0.1 + 0.8 * torch.rand(n, generator=g)
        tr["entropy"] = torch.rand(n, generator=g) * 0.6
        tr["soft"] = torch.tensor([True, False, True, True, False][:n])
        tr["topk_ids"][:, 0] = torch.arange(n)
        traces.append(SoftTrace(**tr))
    rows = []
    for t in traces:
        for z, tau, ent, soft in zip(t.scores.tolist(), t.tau.tolist(), t.entropy.tolist(), t.soft.tolist()):
            if soft:
                e = [math.exp(v / tau) for v in z]
                w = [v / sum(e) for v in e]
                rows.append((max(w), 1 / sum(v * v for v in w), ent > HIGH_ENTROPY))
    m = trace_metrics(traces)
    assert m["soft/top_weight_mean"] == pytest.approx(np.mean([r[0] for r in rows]), rel=1e-5)
    assert m["soft/eff_k_mean"] == pytest.approx(np.mean([r[1] for r in rows]), rel=1e-5)
    high = [r for r in rows if r[2]]
    assert high and len(high) < len(rows)  # the threshold splits this batch
    assert m["soft/top_weight_mean_high_entropy"] == pytest.approx(np.mean([r[0] for r in high]), rel=1e-5)
    assert m["soft/eff_k_mean_high_entropy"] == pytest.approx(np.mean([r[1] for r in high]), rel=1e-5)
    assert m["soft/high_entropy_fraction"] == pytest.approx(len(high) / len(rows))
    assert all(1 <= r[1] <= 4 and 0.25 <= r[0] <= 1 for r in rows)
    hard = [SoftTrace.discrete([1, 2], 4, 9)]
    assert not any(k.startswith(("soft/top_weight", "soft/eff_k")) for k in trace_metrics(hard))
