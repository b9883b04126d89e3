"""The GPU kit's jobs and lease plan (soft_spatial_bench/gpu/jobs.py): every job is runnable by a
kind of the runner's table, the lease plan's calls fit a loan by the recorded timings, docs/gpu.md
shows the exact --only sets, the dry run covers every kind and code path, and no function of the
kit is longer than 80 lines (issue 45)."""
from __future__ import annotations

from pathlib import Path

import pytest

from soft_spatial_bench.gpu import jobs, runner

ROOT = Path(__file__).resolve().parents[3]


def test_every_job_has_a_kind_whose_functions_measure_and_render():
    for job in jobs.plan():
        measure, render = runner.KINDS[job.args["kind"]]
        assert callable(measure) and callable(render), job.key
    with pytest.raises(KeyError, match="unknown job kind 'nope'"):
        runner.KINDS["nope"]


def test_keys_are_unique_and_needs_come_first():
    plan = jobs.plan()
    keys = [j.key for j in plan]
    assert len(keys) == len(set(keys))
    for i, job in enumerate(plan):
        assert all(n in keys[:i] for n in job.needs), job.key


def test_each_lease_fits_a_loan_by_the_recorded_timings():
    by = {j.key: j for j in jobs.plan()}
    for n, lease in enumerate(jobs.LEASES + jobs.LEASES_BEFORE_SPEED, 1):
        assert len(lease) == 2 and {k for c in lease for k in c} <= set(by), n
        for call in lease:
            assert jobs.lease_seconds(call) <= jobs.PLAN_S_PER_CALL, (n, call)
            for k in call:  # a call on a fresh machine can run every job it names
                assert all(need in call for need in by[k].needs), (n, k)
        assert sum(jobs.lease_seconds(c) for c in lease) <= jobs.PLAN_S_PER_LEASE, n
    # what issue 53 asks of the first loan after the sampler's host work went: stock against
    # the plugin's modes with fused kernels, overlap off, profiled; the captured sampler against
    # the eager one; graphs-on parity; the overlap-on table next; E before the speed work lands
    first, second = ({k for c in lease for k in c} for lease in jobs.LEASES[:2])
    assert {"X/sampler", "F/fused-stock-hard-overlap-off", "F/fused-plugin-hard",
            "F/fused-plugin-fixed", "F/fused-plugin-adaptsoft", "G/fixed", "G/adaptsoft"} <= first
    assert all(by[k].args.get("profile") for k in ("F/fused-stock-hard-overlap-off",
                                                    "F/fused-plugin-fixed"))
    assert {"F/fused-stock-hard", "F/fused-plugin-fixed-overlap-on",
            "F/fused-plugin-adaptsoft-overlap-on", "E/fp32"} <= second
    assert jobs.LEASES_BEFORE_SPEED == [[["model/build", "E/fp32"], ["model/build", "E/bf16"]]]
    rest = {k for lease in jobs.LEASES[2:] for c in lease for k in c}
    assert {"E/bf16", "E/hard", "F/8b-stock-hard", "F/8b-plugin-fixed", "F/fi-stock-hard",
            "F/fi-plugin-fixed"} <= rest


def test_the_estimates_add_the_first_engine_of_each_kind_once():
    keys = ["model/build", "F/fused-stock-hard", "F/fused-plugin-fixed", "F/plugin-fixed"]
    by = {j.key: j for j in jobs.plan()}
    assert jobs.lease_seconds(keys) == (sum(by[k].est_s for k in keys) + jobs.FIRST_ENGINE_S["fused"]
                                       + jobs.FIRST_ENGINE_S["native"])


def test_docs_show_each_calls_exact_only_set():
    text = (ROOT / "docs" / "gpu.md").read_text()
    for n, lease in enumerate(jobs.LEASES, 1):
        for c, _ in enumerate(lease, 1):
            assert f"--only {jobs.lease_only(n, c)}" in text, (n, c)
    for call in jobs.LEASES_BEFORE_SPEED[0]:
        assert f"--only {','.join(call)}" in text


def test_the_dry_run_covers_every_kind_and_path():
    by = {j.key: j for j in jobs.plan()}
    dry = [by[k] for k in jobs.DRY_RUN]
    # the overlap kind (X/overlap-parity) is in no loan while overlap stays off: its verdict over
    # fake engines in test_overlap.py, the plugin's records under overlap in
    # tests/sglang_real/test_real_engine_overlap.py; a loan that takes it back takes it into the dry run
    assert not any(by[k].args["kind"] == "overlap" for loan in jobs.LEASES for call in loan for k in call)
    # X/sampler (no engine) runs its dry run in its own test, in-process
    own = {"sampler": "test_sampler_bench.py"}
    assert all((ROOT / "tests/bench/gpu" / f).is_file() for f in own.values())
    assert {j.args["kind"] for j in dry} == ({j.args["kind"] for j in jobs.plan()}
                                             - {"selftest", "overlap", *own})
    engines = [j.args for j in dry if j.args["kind"] == "engine"]
    assert {a["engine"] for a in engines} == {"stock", "plugin"}
    assert {a["kernels"] for a in engines} == {"native", "fused"}
    assert {a["overlap"] for a in engines} == {True, False}
    assert {a["model"] for a in engines} == {"2b", "8b"}
    assert any(a.get("profile") for a in engines)  # the profile pass
    # the parity kind with graphs on (its warm-up generate and static KV splits); graphs off is
    # the same code without them (its server arguments: test_headline.py)
    assert [by[k].args.get("graphs", False) for k in jobs.DRY_RUN if k[0] in "DG" and k != "D/references"] == [True]
    # E/fp32 with its diagnosis; E/bf16 and E/hard are the same job with other settings (each
    # spec's settings and verdict: test_grpo.py; the hard preset's training: tests/e2e/test_multinode_train.py)
    e = [by[k].args for k in jobs.DRY_RUN if k.startswith("E/")]
    assert e == [by["E/fp32"].args] and e[0]["diagnose_dry"]
    assert {by[k].args["kind"] for k in ("E/bf16", "E/hard")} == {"grpo"}
