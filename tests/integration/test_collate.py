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
