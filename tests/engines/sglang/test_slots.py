"""The soft sampler's per-slot state (soft_spatial/engines/sglang/slots.py): a request started in
its slot holds its premixed seed, its next step and its thinking flag; slots outside the table are
refused; a grown table keeps every row; the decode read is Σ_k w_k E[ids_k] of the slot's row, the
same as computing it by hand in float64."""
from __future__ import annotations

import pytest
import torch

from soft_spatial.engines.sglang.slots import SlotTable, to_device
from soft_spatial.softthink.noise import premix_seed, seed_tensor


def test_a_request_starts_in_its_slot_and_nothing_else_moves():
    table = SlotTable(6, 3, "cpu", fixed=True)
    before = {k: v.clone() for k, v in table.columns().items()}
    assert table.step.tolist() == [-1] * 6  # no request yet: a read shows step -1
    idx = table.start([4, 1], [2 ** 64 - 1, 7], [0, 5], [True, False])
    assert idx.tolist() == [4, 1]
    assert torch.equal(table.seed_mix[[4, 1]], premix_seed(seed_tensor([2 ** 64 - 1, 7])))
    assert table.step.tolist() == [-1, 5, -1, -1, 0, -1]
    assert table.thinking.tolist() == [False, False, False, False, True, False]
    for name in ("ids", "weights"):
        assert torch.equal(table.columns()[name], before[name])
    with pytest.raises(IndexError, match="slot 6 outside the pool's 6 rows"):
        table.index([2, 6])


def test_a_grown_table_keeps_every_row():
    table = SlotTable(3, 2, "cpu")
    table.start([2], [11], [9], [True])
    table.ids[2] = torch.tensor([5, 6])
    grown = table.grown(8)
    assert grown.size == 8 and not grown.fixed
    for name, col in table.columns().items():
        assert torch.equal(grown.columns()[name][:3], col), name
    assert grown.step[3:].tolist() == [-1] * 5


def test_the_decode_read_is_the_slots_mixture():
    g = torch.Generator().manual_seed(0)
    emb = torch.randn(50, 8, generator=g)
    table = SlotTable(5, 3, "cpu")
    table.ids[:] = torch.randint(0, 50, (5, 3), generator=g)
    table.weights[:] = torch.softmax(torch.randn(5, 3, generator=g), -1)
    table.weights[2] = torch.tensor([1.0, 0.0, 0.0])  # a discrete row: exactly its token
    slots = torch.tensor([3, 2, 3, 0])
    got = table.mixture(slots, lambda ids: emb[ids])
    want = torch.stack([(table.weights[s].double()[:, None] * emb[table.ids[s]].double()).sum(0)
                        for s in slots.tolist()])
    torch.testing.assert_close(got.double(), want, rtol=1e-6, atol=1e-6)
    assert torch.equal(got[1], emb[table.ids[2, 0]])


def test_host_values_reach_the_device_as_asked():
    t = to_device([1, 2, 3], "cpu")
    assert t.dtype == torch.long and t.tolist() == [1, 2, 3]
    assert to_device([True, False], "cpu", torch.bool).tolist() == [True, False]
