"""The records' packed rows (:mod:`soft_spatial.engines.sglang.records`): one int32 row per
request and step, every field exact (ids and the bits of every float), a layout word that says how
to read it, the noise step the server checks; one copy to the host, taken when the step is
sampled."""
from __future__ import annotations

import math

import pytest
import torch

from soft_spatial.engines.sglang.records import (PackedRows, RecordLayout, RecordsError, pack,
                                                 step_records, unpack)
from soft_spatial.softthink import SoftTrace, StepRecord
from soft_spatial.softthink.trace import TRACE_KEYS


def _records(rows, k, f, seed=0):
    """Records whose every field holds awkward values: large ids, negative zero, subnormals,
    infinities, NaN payloads, values that are no float32 of a short decimal."""
    g = torch.Generator().manual_seed(seed)
    rec = StepRecord.zeros(rows, k, f).present()
    rec["topk_ids"] = torch.randint(0, 151_936, (rows, k), generator=g)
    rec["topk_ids"][0, 0] = 2 ** 31 - 1
    specials = torch.tensor([-0.0, 1e-45, float("inf"), -float("inf"), math.pi, 1 / 3])
    for name in ("scores", "ctrl_x"):
        rec[name] = torch.randn(rec[name].shape, generator=g) * 10
        rec[name].view(-1)[: len(specials)] = specials[: rec[name].numel()]
    for name in ("tau", "u", "entropy"):
        rec[name] = torch.rand(rows, generator=g)
    rec["soft"] = torch.rand(rows, generator=g) > 0.5
    rec["loglik"] = torch.randn(rows, generator=g)
    if rows > 1:
        rec["loglik"][-1] = float("nan")
    return StepRecord(**rec)


@pytest.mark.parametrize("k,f", [(1, 0), (5, 33), (7, 65)])
def test_packed_rows_round_trip_bit_for_bit(k, f):
    rows = 6
    rec = _records(rows, k, f)
    layout = RecordLayout(k, f)
    header = torch.full((rows, 1), layout.word, dtype=torch.int32)
    packed = pack(rec, torch.arange(3, 3 + rows), header)
    assert packed.shape == (rows, layout.width) and packed.dtype == torch.int32
    items = PackedRows(packed)
    assert len(items) == rows and all(len(items[i]) == 4 * layout.width for i in range(rows))
    back = step_records(items)
    for name in (*TRACE_KEYS, "loglik"):  # bitwise: compare the bit patterns of floats
        a, b = getattr(rec, name), back[name]
        assert a.dtype == b.dtype and a.shape == b.shape, name
        view = (lambda t: t.view(torch.int32)) if a.dtype == torch.float32 else (lambda t: t)
        assert torch.equal(view(a), view(b)), name
    assert back["step"].tolist() == list(range(3, 3 + rows))


def test_a_requests_rows_unpack_to_its_trace_and_bad_rows_are_refused():
    k, f, n = 4, 9, 5
    steps = [_records(1, k, f, seed=s) for s in range(n)]
    header = torch.full((1, 1), RecordLayout(k, f).word, dtype=torch.int32)
    rows = [PackedRows(pack(r, torch.tensor([t]), header))[0] for t, r in enumerate(steps)]
    trace, loglik = unpack(rows, "request q")
    want = SoftTrace.concat([SoftTrace(**r.record_fields()) for r in steps])
    assert SoftTrace.from_lists(trace).to_lists() == want.to_lists()
    assert loglik == [float(r.loglik[0]) for r in steps]
    with pytest.raises(RecordsError, match="request q: record 1 was sampled at noise step 2"):
        unpack([rows[0], rows[2]], "request q")
    other = PackedRows(pack(_records(1, k + 1, f), torch.tensor([1]), torch.full(
        (1, 1), RecordLayout(k + 1, f).word, dtype=torch.int32)))[0]
    with pytest.raises(RecordsError, match="request q: packed records of"):
        unpack([rows[0], other], "request q")
    with pytest.raises(RecordsError, match="no records"):
        unpack([], "request q")
    with pytest.raises(ValueError, match="layout word"):
        RecordLayout(1 << 16, 0)


def test_the_host_copy_is_taken_when_the_step_is_sampled():
    """A later change of the device tensor (the next step writing the same buffer, as a replayed
    graph does) does not reach rows already handed to SGLang."""
    rec = _records(2, 2, 1)
    header = torch.full((2, 1), RecordLayout(2, 1).word, dtype=torch.int32)
    packed = pack(rec, torch.tensor([0, 0]), header)
    items = PackedRows(packed)
    first = bytes(items[0])
    packed.zero_()
    assert items[0] == first and items[-1] == items[1]
    with pytest.raises(IndexError):
        items[2]
    assert "2 rows" in repr(items)
