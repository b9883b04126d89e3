"""X/sampler (soft_spatial_bench/gpu/sampler_bench.py) on the CPU's static path: every mode and
size measured, the graphed records equal to the eager ones, the noise kernel's check, the report;
and the job fails, naming the step and row, when a graphed record differs."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from soft_spatial_bench.gpu import sampler_bench
from soft_spatial_bench.gpu.report import JobFailed


def test_the_dry_run_measures_every_mode_and_size_and_compares_the_records():
    v = sampler_bench.measure(SimpleNamespace(dry_run=True), None)
    assert v.mismatch is None and v.noise == {"fused": False, "equal": True}
    assert {(r["mode"], r["rows"], r["path"]) for r in v.rows} == {
        (m, n, p) for m in ("hard", "fixed", "adaptsoft") for n in (8, 64)
        for p in ("eager", "graphed")}
    graphed = [r["stats"] for r in v.rows if "stats" in r]
    assert all(s == {"extend": 1, "graphed": v.steps + 2} for s in graphed)
    text = "\n".join(sampler_bench.render(v))
    assert "bit for bit: yes" in text and "| fixed | 64 |" in text


def test_a_graphed_record_that_differs_fails_the_job(monkeypatch):
    from soft_spatial.engines.sglang import records
    original = records.PackedRows.__getitem__
    calls = {"n": 0}

    def tampered(self, i):
        row = original(self, i)
        calls["n"] += 1
        return row[:-1] + b"\xff" if calls["n"] == 40 else row

    monkeypatch.setattr(records.PackedRows, "__getitem__", tampered)
    with pytest.raises(JobFailed, match="records differ from the eager ones: hard, 8 rows"):
        sampler_bench.measure(SimpleNamespace(dry_run=True), None)
