"""The GPU kit's headline plan on the CPU (``scripts/gpu/check.py --plan headline --dry-run``):
SGLang's real engine with the plugin, the embedded engine and verl's trainer run every headline
job at tiny sizes through the same code a GPU runs — the shared model, F's four engines, D's
references and parity engines, E's run to step 2 — each in the plan's watched child process, each
result a JSON line and the Markdown report rebuilt after it."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.sglang, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]
HEADLINE = ["model/build", "F/stock-hard", "F/stock-hard-overlap-off", "F/plugin-hard",
            "F/plugin-fixed", "D/references", "D/fixed", "D/adaptsoft", "E/grpo"]


def test_the_headline_plan_runs_whole_on_the_cpu(tmp_path):
    out = tmp_path / "out"
    res = subprocess.run([sys.executable, str(ROOT / "scripts/gpu/check.py"), "--plan", "headline",
                          "--dry-run", "--no-extras", "--out", str(out), "--work",
                          str(tmp_path / "work"), "--deadline", "1500"],
                         capture_output=True, text=True, cwd=tmp_path, timeout=1700,
                         env=dict(os.environ, SGLANG_USE_CPU_ENGINE="1"))
    report = (out / "report.md").read_text() if (out / "report.md").exists() else ""
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:] + report
    recs = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    jobs = [r for r in recs if r["kind"] == "job" and r["part"] != "plan"]
    # each job: a "started" line, then its result, in plan order, with wall times
    assert [(r["part"] + "/" + r["job"], r["status"]) for r in jobs] == [
        (k, s) for k in HEADLINE for s in ("started", "ok")]
    assert all(r["time"] and r["elapsed_s"] >= 0 for r in jobs)
    assert [r["elapsed_s"] for r in jobs] == sorted(r["elapsed_s"] for r in jobs)
    val = {r["part"] + "/" + r["job"]: r["values"] for r in jobs if r["status"] == "ok"}
    for key in HEADLINE[1:5]:  # F: both batches measured, positive
        assert val[key]["tps_big"] > 0 and val[key]["tps_small"] > 0, key
    assert val["F/plugin-fixed"]["soft_step_fraction"] == 1.0  # the soft engine decoded softly
    assert val["F/plugin-hard"]["soft_step_fraction"] == 0.0
    for mode in ("fixed", "adaptsoft"):  # D: fp32 on the CPU, every row within the bound
        d = val[f"D/{mode}"]
        assert d["passed"] and d["within_bound"] == d["rows"] == 4, d
    e = val["E/grpo"]
    assert e["steps"] == [1, 2] and e["sync_equal"] and not e["problems"], e
    # the report: the headline tables, every job's section; what comes back: at most 5 files
    assert "## Headline" in report and "| plugin fixed | 4 |" in report
    assert "| fixed | pass | 4/4 |" in report and "**E**: ok — steps [1, 2]" in report
    for key in HEADLINE:
        assert f"## {key.replace('/', ' ')}: ok" in report, key
    assert {p.name for p in out.iterdir()} == {"report.md", "results.jsonl", "log.txt",
                                               "nvidia-smi.txt", "stage-e.tar.gz"}
