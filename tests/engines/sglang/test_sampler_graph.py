"""The captured decode step's bookkeeping (soft_spatial/engines/sglang/sampler_graph.py), on the
CPU's static path (what a CUDA graph captures, run without one): a batch is padded to the next
size with SGLang's padding slot 0, the step runs on the static buffers and its leading rows come
back, one graph per (key, size) is kept until invalidated, a step dispatches only its copies and
the replay, and a batch above the largest size is refused. (The sampler's own step through it:
tests/engines/sglang/test_runtime.py.)"""
from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from soft_spatial.engines.sglang.sampler_graph import SamplerGraphs


def _body(seen):
    def body(logits, hidden, slots):
        seen.append(slots.clone())
        tokens = logits.argmax(-1) + 1000 * slots
        packed = torch.stack([slots, logits.argmax(-1)], 1).to(torch.int32)
        return tokens, packed
    return body


def test_a_batch_is_padded_with_the_padding_slot_and_cut_back():
    graphs, seen = SamplerGraphs([8, 2, 4, 2], capture=False), []
    assert graphs.sizes == [2, 4, 8] and graphs.largest == 8
    assert [graphs.size_for(n) for n in (1, 2, 3, 4, 5, 8, 9)] == [2, 2, 4, 4, 8, 8, None]
    logits = torch.randn(3, 11)
    logits[:, 10] = 50.0  # the banned id would win
    banned = torch.tensor([10])
    tokens, packed = graphs.run("k", _body(seen), banned, logits, None, torch.tensor([7, 3, 5]),
                                width=2)
    assert seen[-1].tolist() == [7, 3, 5, 0]  # padded to 4 on slot 0
    want = logits[:, :10].argmax(-1)
    assert tokens.tolist() == (want + 1000 * torch.tensor([7, 3, 5])).tolist()
    assert packed.tolist() == [[7, int(want[0])], [3, int(want[1])], [5, int(want[2])]]
    assert torch.equal(logits[:, 10], torch.full((3,), 50.0))  # the caller's logits untouched
    with pytest.raises(ValueError, match="9 rows, the largest graph has 8"):
        graphs.run("k", _body(seen), None, torch.randn(9, 11), None, torch.arange(9), width=2)


def test_one_graph_per_key_and_size_until_invalidated():
    graphs, seen = SamplerGraphs([2, 4], capture=False), []
    replays = []
    graphs.wrap_replay(lambda replay: lambda g: (replays.append(g), replay(g)))
    for rows, key in ((3, "a"), (4, "a"), (2, "a"), (3, "b")):
        graphs.run(key, _body(seen), None, torch.randn(rows, 5), None, torch.arange(rows),
                   width=2)
    assert len(graphs._graphs) == 3 and len(replays) == 4 and replays[0] is replays[1]
    graphs.invalidate()
    graphs.run("a", _body(seen), None, torch.randn(3, 5), None, torch.arange(3), width=2)
    assert len(graphs._graphs) == 1 and replays[-1] is not replays[0]


class _Ops(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


def test_a_step_dispatches_its_copies_and_the_replay_only():
    """Outside the replay a step of a size seen before copies its inputs in and its tokens out:
    no view of the static buffers is made again."""
    graphs, seen = SamplerGraphs([4], capture=False), []
    args = (torch.randn(3, 5), torch.randn(3, 2), torch.arange(3))
    graphs.run("k", _body(seen), None, *args, width=2)

    def replay_unseen(g):  # the replay's own ops are the graph's
        with torch.utils._python_dispatch._disable_current_modes():
            g()

    graphs.wrap_replay(lambda replay: replay_unseen)
    with _Ops() as counted:
        graphs.run("k", _body(seen), None, *args, width=2)
    assert sorted(counted.ops) == sorted(["aten.copy_.default"] * 3 + ["aten.zero_.default",
                                                                      "aten.clone.default"])
