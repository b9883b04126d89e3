"""The GPU kit's SGLang stage (scripts/gpu/check.py, stage d) in its dry run: SGLang's real engine
on the CPU with the soft plugin, against the embedded engine on the same weights and seeds, in
every mode; then its throughput table. The same code runs on a GPU with bf16 throughput engines."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.sglang, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]


def test_stage_d_dry_run_matches_the_embedded_engine(tmp_path):
    out = tmp_path / "report.md"
    res = subprocess.run([sys.executable, str(ROOT / "scripts/gpu/check.py"), "--dry-run",
                          "--stages", "d", "--drift", "--out", str(out)], capture_output=True,
                         text=True, cwd=tmp_path, env=dict(os.environ, SGLANG_USE_CPU_ENGINE="1"))
    report = out.read_text() if out.exists() else ""
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:] + report
    assert "## d. SGLang soft rollout" in report and "**ok**" in report
    assert "mrope_section [4, 2, 2]" in report and "head_dim 16" in report  # the checked config
    parity = {m: re.search(rf"^\| {m} \| (\d+)/(\d+) \| ([^|]+) \| ([^|]+) \| ([^|]+) \| "
                           rf"(\d+)/(\d+) \| (\d+)/(\d+) \|$", report, re.M)
              for m in ("hard", "fixed", "adaptsoft")}
    for mode, row in parity.items():
        assert row is not None, (mode, report)
        same, total, loglik = int(row[1]), int(row[2]), float(row[3])
        assert total == 4 and same >= int(row[6]), (mode, report)  # 2 prompts × 2 samples
        # SGLang leaves local fp32's path only on rows where local fp32 leaves its own fp64 run
        # (ill-conditioned: the soft feedback amplifies fp32 rounding, docs/sglang.md)
        rows = re.search(rf"\*\*{mode}\*\* — rows: (\d+) ok, (\d+) ill-conditioned .*?, "
                         rf"(\d+) off the path, (\d+) beyond the bound", report)
        assert rows and int(rows[1]) + int(rows[2]) == 4 and rows[3] == rows[4] == "0", (mode, report)
        if mode == "hard":
            assert same == 4, (mode, report)  # tokens fed back: every path equal
        assert loglik <= 1e-3, (mode, report)  # fp32 rounding only (tests/sglang_real tolerances)
        assert int(row[8]) == int(row[9]) == 4, (mode, report)  # every row within the bound
    # the diagnostics: per mode, the first difference and the per-step |Δ| of the three pairs
    for mode in ("hard", "fixed", "adaptsoft"):
        section = report.split(f"**{mode}** — rows:")[1].split("**")[0]
        assert re.search(r"first difference beyond 0.003, SGLang against local fp64: "
                         r"(none|row \d+ step \d+ \w+: SGLang .+, fp64 .+)\n", section), section
        for pair in ("SGLang against local fp32", "SGLang against local fp64",
                     "local fp32 against local fp64"):
            assert re.search(rf"- {pair}: \d/4 rows on the same path; first path divergence: ", section)
            for f in ("scores", "tau", "loglik"):  # one value per step (8 steps)
                curve = re.search(rf"- {pair}: .*?max \\\|Δ {f}\\\| per step \(every 1\): ([^\n]+)\n",
                                  section, re.S)
                assert curve and len(curve[1].split()) == 8, (pair, f, section)
        if mode == "hard":  # hard steps feed tokens back: nothing amplifies, every path equal
            assert section.count("4/4 rows on the same path") == 3, section
    drift = report.split("Self-drift of the embedded engine")[1]
    assert all(f"- {m}: " in drift for m in ("hard", "fixed", "adaptsoft")), drift
    for mode in ("hard", "fixed", "adaptsoft"):  # the throughput table: positive tok/s per mode
        row = re.findall(rf"^\| {mode} \| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \|", report, re.M)
        assert row and float(row[0][0]) > 0 and float(row[0][2]) > 0, (mode, report)
