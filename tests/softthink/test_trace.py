"""SoftTrace (docs/design.md §3): transport and collation round trips."""
import json

import pytest
import torch

from soft_spatial.softthink import SoftTrace, StepRecord, TraceRecorder, collate_traces, uncollate_traces


def random_trace(n, k=5, f=9, seed=0, soft_until=None):
    g = torch.Generator().manual_seed(seed)
    soft_until = n if soft_until is None else soft_until
    t = SoftTrace(topk_ids=torch.randint(0, 1000, (n, k), generator=g),
                  scores=torch.randn(n, k, generator=g), tau=torch.rand(n, generator=g),
                  u=torch.randn(n, generator=g), ctrl_x=torch.randn(n, f, generator=g),
                  entropy=torch.rand(n, generator=g), soft=torch.arange(n) < soft_until)
    hard = SoftTrace.discrete(t.tokens[soft_until:].tolist(), k, f)
    return SoftTrace.concat([t[:soft_until], hard]) if soft_until < n else t


def test_collate_uncollate_round_trip_is_lossless():
    traces = [random_trace(n, seed=n, soft_until=max(0, n - 2)) for n in (7, 1, 12, 3)]
    batch = collate_traces(traces, length=16)
    assert batch["trace_topk_ids"].shape == (4, 16, 5)
    assert batch["trace_ctrl_x"].shape == (4, 16, 9)
    assert batch["trace_mask"].sum(-1).tolist() == [7, 1, 12, 3]
    assert (batch["trace_scores"][0, 7:] == 0).all() and not batch["trace_soft"][0, 7:].any()
    back = uncollate_traces(batch)
    assert all(a.equal(b) for a, b in zip(traces, back))
    with pytest.raises(ValueError, match="longer"):
        collate_traces(traces, length=8)


def test_discrete_records_layout():
    t = SoftTrace.discrete([5, 0, 9], k=4, feature_dim=3)
    assert t.topk_ids.tolist() == [[5, 0, 0, 0], [0, 0, 0, 0], [9, 0, 0, 0]]
    assert (t.scores == 0).all() and not t.soft.any() and t.tokens.tolist() == [5, 0, 9]


def test_lists_transport_round_trip_through_json():
    t = random_trace(9, seed=3, soft_until=6)
    wire = json.loads(json.dumps(t.to_lists()))
    back = SoftTrace.from_lists(wire)
    assert back.equal(t)  # fp32 → Python float → fp32 is exact
    empty = SoftTrace.from_lists({k: [] for k in wire}, k=5, feature_dim=9)
    assert len(empty) == 0 and empty.k == 5
    with pytest.raises(KeyError):
        SoftTrace.from_lists({"topk_ids": []})


def test_recorder_builds_per_row_traces():
    rec = TraceRecorder()
    steps = [random_trace(3, seed=s) for s in range(4)]  # 4 steps of a batch of 3 rows
    for st in steps:
        rec.record(st)  # a batched step: its record fields
    out = rec.build(lengths=[4, 2, 0], rows=[0, 1, 2])
    assert [len(t) for t in out] == [4, 2, 0]
    for step, st in enumerate(steps):
        assert torch.equal(out[0].topk_ids[step], st.topk_ids[0])
    assert torch.equal(out[1].scores, torch.stack([st.scores[1] for st in steps[:2]]))


def test_validation_errors():
    with pytest.raises(ValueError, match="steps"):
        SoftTrace(torch.zeros(3, 5, dtype=torch.long), torch.zeros(3, 5), torch.zeros(2),
                  torch.zeros(3), torch.zeros(3, 9), torch.zeros(3), torch.zeros(3, dtype=bool))
    with pytest.raises(ValueError, match="K="):
        collate_traces([random_trace(2, k=5), random_trace(2, k=4)])


def test_the_record_schema_is_declared_once_on_softtrace():
    """TRACE_KEYS, the dtypes a trace casts to, an engine's zero step and the collated layout all
    follow SoftTrace's fields and their metadata."""
    from dataclasses import fields

    from soft_spatial.softthink.trace import TRACE_KEYS, TRACE_PREFIX, SoftTrace, collate_traces

    schema = {f.name: (f.metadata["dtype"], f.metadata["width"]) for f in fields(SoftTrace)}
    assert TRACE_KEYS == tuple(schema) == ("topk_ids", "scores", "tau", "u", "ctrl_x", "entropy", "soft")
    step = StepRecord.zeros(3, 5, 9)
    zero = step.record_fields()
    widths = {None: (), "k": (5,), "f": (9,)}
    assert {k: (v.dtype, tuple(v.shape)) for k, v in zero.items()} == {
        k: (dt, (3,) + widths[w]) for k, (dt, w) in schema.items()}
    assert all(not v.any() for v in zero.values())
    # one batched step: the record fields, its likelihood, the debug fields only when asked
    assert set(step.present()) == set(TRACE_KEYS) | {"loglik"} and step.weights is None
    assert step.loglik.dtype == torch.float32 and step.tokens.shape == (3,)
    debug = StepRecord.zeros(3, 5, 9, debug=True)
    assert debug.weights.shape == debug.logp.shape == (3, 5)
    # a trace built from other dtypes is cast to the schema's
    tr = SoftTrace(*(v.double() if v.dtype != torch.bool else v for v in zero.values()))
    assert {k: getattr(tr, k).dtype for k in TRACE_KEYS} == {k: dt for k, (dt, _) in schema.items()}
    batch = collate_traces([tr, tr[:1]])
    assert set(batch) == {TRACE_PREFIX + k for k in TRACE_KEYS} | {TRACE_PREFIX + "mask"}
    assert {k: batch[TRACE_PREFIX + k].dtype for k in TRACE_KEYS} == {k: dt for k, (dt, _) in schema.items()}
