"""The GPU kit's headline plan on the CPU (``scripts/gpu/check.py --plan headline --dry-run
--only <jobs.DRY_RUN>``): SGLang's real engine with the plugin, the embedded engine and verl's
trainer run every code path of the lease plan's jobs once at tiny sizes through the same code a
GPU runs — the shared model and the 8B shape without weights, F's engines (stock and plugin, native
and fused kernels, overlap on and off, decoding timed from the schedulers' own logs, a profile
pass; no warm-up engine on the CPU, which has no JIT: the warm-up engine starts and uses an engine
through the calls of the measured one, and which jobs start one on a device is
tests/bench/gpu/test_graphs.py's), the sampler's sync check, D's references
and a parity engine (G: graphs on, its warm-up generate; D's graphs-off engine is the same code
without it), E in fp32 with its diagnosis — each in the plan's watched child process,
each result a JSON line and the Markdown report rebuilt after it. (The plugin under overlap
scheduling, records on against off: tests/sglang_real/test_real_engine_overlap.py; the kit's
X/overlap-parity, in no loan while overlap stays off, is unit-tested in tests/bench/gpu/test_overlap.py;
E/hard, E/fp32's job in hard mode: jobs.DRY_RUN says where each of its parts is checked.)

Its E job is also the suite's training run through verl with the sglang_soft rollout on the
CPU (verl's Ray trainer and FSDP2/gloo worker, SGLangSoftHttpServer launching SGLang's scheduler
with the plugin, verl's weight sync before every step and the controller's after it): the
controller installed at every sync is the one sent, the replay within its bound, every part of a
step timed, the n samples of a prompt sharing its prefill, and no process left behind. (The
stage-e dry run, a third verl run that trained and resumed, checked the same; its resume is
unit-tested in tests/bench/gpu/test_grpo.py and test_headline.py, and a resumed adaptsoft run's
controller and optimizer in tests/e2e/test_train_cpu.py.)"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import uuid

import pytest
from real_engine import BATCH_LOG_ENV, assert_marked_gone, assert_prefill_shared

from soft_spatial_bench.gpu.jobs import DRY_RUN

pytestmark = [pytest.mark.sglang, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(2700)  # SGLang CPU engines and a verl run one after another: ~30 min
# on the 2-core machine under a load of 12 (2026-11-28); the verdict never depends on the time
def test_the_headline_plan_runs_whole_on_the_cpu(tmp_path):
    out, mark = tmp_path / "out", uuid.uuid4().hex
    res = subprocess.run([sys.executable, str(ROOT / "scripts/gpu/check.py"), "--plan", "headline",
                          "--dry-run", "--only", ",".join(DRY_RUN), "--out", str(out), "--work",
                          str(tmp_path / "work"), "--deadline", "2400"],
                         capture_output=True, text=True, cwd=tmp_path, timeout=2600,
                         env=dict(os.environ, SGLANG_USE_CPU_ENGINE="1", SOFT_SPATIAL_TEST_MARK=mark,
                                  **{BATCH_LOG_ENV: str(tmp_path / "batches.jsonl")}))
    report = (out / "report.md").read_text() if (out / "report.md").exists() else ""
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:] + report
    recs = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    jobs = [r for r in recs if r["kind"] == "job" and r["part"] != "plan"]
    order = [k for k in DRY_RUN]  # the plan's order (model/build-8b comes with its F job)
    got = [(r["part"] + "/" + r["job"], r["status"]) for r in jobs]
    assert sorted(got) == sorted((k, s) for k in order for s in ("started", "ok")), got
    assert [r["elapsed_s"] for r in jobs] == sorted(r["elapsed_s"] for r in jobs)
    val = {r["part"] + "/" + r["job"]: r["values"] for r in jobs if r["status"] == "ok"}
    f_keys = [k for k in DRY_RUN if k.startswith("F/")]
    for key in f_keys:  # both batches measured, every repeat kept, what ran named
        v = val[key]
        assert v["tps_big"] > 0 and v["tps_small"] > 0 and len(v["tps_big_all"]) == 1, key
        assert v["host_us_big"] > 0 and v["host_us_small"] > 0, key  # decoding only, logged
        assert {"kernels", "attention", "overlap", "graphs", "graph_batches"} <= set(v), key
    prof = val["F/fused-plugin-adaptsoft"]["profile"]  # the scheduler's own trace, summarised
    assert prof["steps"] >= 5 and prof["host_us"]["run"] > 0 and prof["host_us"]["sample"] > 0
    assert prof["kernels_outside_graphs"] == 0 and prof["top"] == []  # no GPU: no kernel
    f_ok = [r["values"] for r in jobs if r["part"] == "F" and r["status"] == "ok"]
    kinds = {(v["kernels"], v["attention"], v["model"]) for v in f_ok}
    assert len(kinds) == 3, kinds  # native, fused (2B) and fused 8B
    # no warm-up engine on the CPU (on a device: one per kind, tests/bench/gpu/test_graphs.py)
    assert [v["warmup_engine_s"] for v in f_ok] == [None] * len(f_ok)
    for key in ("F/fused-plugin-adaptsoft", "F/8b-plugin-fixed"):  # the plugin's rows think softly
        assert val[key]["soft_step_fraction"] == 1.0, key
    assert val["F/stock-hard"]["overlap"] and val["F/stock-hard"]["soft_step_fraction"] is None
    assert val["F/8b-plugin-fixed"]["model"] == "8b" and val["model/build-8b"]["weights"]
    assert val["X/sync"]["waits"] == []
    d = val["G/adaptsoft"]  # fp32 on the CPU, every row within the bound
    assert d["passed"] and d["within_bound"] == d["rows"] == 4, d
    assert val["G/adaptsoft"]["graphs_ran"].startswith("off (CPU")  # said, not hidden
    e = val["E/fp32"]
    assert e["steps"] == [1] and e["sync_equal"] and not e["problems"], e
    assert e["verdict"]["status"] == "pass", e["verdict"]
    diag = e["diagnosis"]  # run in every dry run: the first divergent step, tensor by tensor
    assert diag["likelihood"]["first_beyond"] is None and diag["mixture_max_abs"] < 1e-5, diag
    assert diag["positions"]["mismatched_steps"] == 0 and diag["vision"]["grid_equal"], diag
    timed = {row[0]: row[2:] for row in e["timing_rows"]}  # every part of the step, timed
    for key in ("timing_s/gen", "timing_s/old_log_prob", "timing_s/ref", "timing_s/update_actor",
                "timing_s/update_weights", "actor/adaptsoft/alignment_s"):
        assert key in timed and all(x > 0 for x in timed[key]), (key, timed.get(key))
    assert "A step's price" not in report  # E/bf16 did not run: no ratio invented
    assert "## Headline" in report and "**Verdict: pass**" in report
    for key in DRY_RUN:
        assert f"## {key.replace('/', ' ')}: ok" in report, key
    assert {p.name for p in out.iterdir()} == {"report.md", "results.jsonl", "log.txt",
                                               "nvidia-smi.txt", "stage-e.tar.gz"}
    # verl's requests (E/fp32's: 2 prompts in its one step, n = 2) shared each prompt's prefill;
    # the plan's own engines name theirs soft-<tag>-… (the plugin's) and stock-<tag>-… (stock
    # SGLang's)
    assert_prefill_shared(tmp_path / "batches.jsonl", prompts=2, n=2,
                          rids=lambda rid: not rid.startswith(("soft-", "stock-")))
    assert_marked_gone(mark)
