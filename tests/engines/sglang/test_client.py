"""The verl-server side of the SGLang soft backend (:mod:`soft_spatial.engines.sglang.client`, no
sglang import): request parameters, record accumulation across streamed slices, the controller's
wire format."""
from __future__ import annotations

import pytest
import torch

from controller_helpers import trained_controller
from soft_spatial.engines.sglang.client import (TraceAccumulator, decode_controller,
                                                encode_controller, request_params, split_records)
from soft_spatial.engines.sglang.records import RECORD_KEY, PackedRows, RecordLayout, pack
from soft_spatial.softthink.settings import sampling_config
from soft_spatial.softthink import SoftTrace, StepRecord


def _packed_step(step: int, rows: int, k: int = 2, f: int = 3) -> list[bytes]:
    """One step's packed rows of ``rows`` requests (records of known values)."""
    rec = {"topk_ids": torch.tensor([[step, 7]] * rows), "scores": torch.full((rows, k), 0.5),
           "tau": torch.full((rows,), 0.25), "u": torch.zeros(rows),
           "ctrl_x": torch.full((rows, f), -1.5), "entropy": torch.full((rows,), 0.125),
           "soft": torch.tensor([step % 2 == 0] * rows), "loglik": torch.full((rows,), -1.0)}
    header = torch.full((rows, 1), RecordLayout(k, f).word, dtype=torch.int32)
    return list(PackedRows(pack(StepRecord(**rec), torch.full((rows,), step), header)))


def test_trace_accumulator_concatenates_streamed_slices():
    """Slices of one key, streamed per request as SGLang streams them, come back as the request's
    whole trace; other keys are ignored; too few records or none are refused."""
    acc = TraceAccumulator()
    steps = [_packed_step(i, 2) for i in range(5)]
    for s0, s1 in ((0, 2), (2, 5)):  # two slices of request a, one of b
        info = {RECORD_KEY: [[steps[i][0] for i in range(s0, s1)],
                             [steps[i][1] for i in range(s0, min(s1, 3))]],
                "other": [[1], [2]]}
        acc.feed(["a", "b"], info)
    assert acc.received("a") == 5 and acc.received("b") == 3
    trace, loglik = split_records(acc.pop("a"), 5, "a")
    assert SoftTrace.from_lists(trace).tokens.tolist() == [0, 1, 2, 3, 4]
    assert trace["soft"] == [True, False, True, False, True] and trace["tau"] == [0.25] * 5
    assert trace["ctrl_x"] == [[-1.5] * 3] * 5 and loglik == [-1.0] * 5
    with pytest.raises(RuntimeError, match="3 records for 4 tokens"):
        split_records(acc.pop("b"), 4, "b")
    with pytest.raises(RuntimeError, match="no soft records"):
        split_records(None, 1)
    assert len(acc) == 0


def test_request_params_match_local_soft_sampling():
    s = sampling_config({"temperature": 0, "top_k": -1, "max_tokens": 9}, 20)
    assert s.greedy and s.top_k == 0 and s.max_new_tokens == 9
    p = request_params(123, s)
    assert p["seed"] == 123 and p["greedy"] is True


def test_controller_blob_roundtrip():
    ctrl = trained_controller(16)
    state = ctrl.to_state()
    back = decode_controller(encode_controller(state))
    assert (back.hidden_size, back.config) == (state.hidden_size, state.config)
    assert all(torch.equal(back.weights[n], v) for n, v in state.weights.items())
