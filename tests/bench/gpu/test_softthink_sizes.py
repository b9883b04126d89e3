"""B/softthink (soft_spatial/bench/gpu/softthink_sizes.py) at its dry run's sizes on the CPU:
exact gradient alignment against the naive form, within fp32's rounding, and each softthink
operation timed; the report holds both tables. On a GPU the same job runs at V=151,936, D=4,096,
N up to 32k (the plan's ``--only B/softthink``)."""
from __future__ import annotations

from soft_spatial.bench.gpu import softthink_sizes
from soft_spatial.bench.gpu.context import KitContext


def test_the_dry_run_aligns_as_the_naive_form_and_times_each_operation(tmp_path):
    ctx = KitContext(dry_run=True, device="cpu", work=tmp_path, out=tmp_path, deadline_at=0.0,
                     report=None)
    r = softthink_sizes.measure(ctx, None)
    assert (r.vocab, r.hidden, r.naive_steps) == (1000, 64, 4)
    (row,) = r.alignment
    assert row[0] == 256 and float(row[-1]) < 1e-5  # N; ours against the naive form
    assert [op[0].split(" ")[0] for op in r.ops] == ["Gumbel", "replay", "per-step"]
    assert all(op[2] > 0 for op in r.ops)
    text = "\n".join(softthink_sizes.render(r))
    assert "V=1000, D=64" in text and "| 256 |" in text and "| Gumbel log-density (eq. 5) |" in text
