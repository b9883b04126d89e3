"""The verl-server side of the SGLang soft backend (:mod:`soft_spatial.engines.sglang.client`, no
sglang import): request parameters, record accumulation across streamed slices, the controller's
wire format."""
from __future__ import annotations

import pytest
import torch

from controller_helpers import trained_controller
from soft_spatial.engines.sglang.client import (INFO_KEYS, TraceAccumulator, decode_controller,
                                                encode_controller, info_key, request_params,
                                                split_records)
from soft_spatial.softthink.settings import sampling_config
from soft_spatial.softthink import SoftTrace


def test_trace_accumulator_concatenates_streamed_slices():
    acc = TraceAccumulator()
    k = lambda n: info_key(n)  # noqa: E731
    full = {k(key): [] for key in INFO_KEYS}
    steps = [{"topk_ids": [[i, 0]], "scores": [[0.5, 0.25]], "tau": [0.5], "u": [0.0],
              "ctrl_x": [[0.0]], "entropy": [0.1], "soft": [True], "loglik": [-1.0]}
             for i in range(5)]
    for s0, s1 in ((0, 2), (2, 5)):  # two slices of request a, one of b
        info = {k(key): [sum((steps[i][key] for i in range(s0, s1)), []), []]
                for key in INFO_KEYS}
        info["other"] = [[1], [2]]
        acc.feed(["a", "b"], info)
    for key in INFO_KEYS:
        full[k(key)] = sum((s[key] for s in steps), [])
    got = acc.pop("a")
    assert {kk: got[kk] for kk in full} == full and "other" not in got
    trace, loglik = split_records(got, 5)
    assert SoftTrace.from_lists(trace).tokens.tolist() == [0, 1, 2, 3, 4]
    assert loglik == [-1.0] * 5
    with pytest.raises(RuntimeError, match="records"):
        split_records(acc.pop("b"), 3)
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
