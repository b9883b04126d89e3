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
                          "--stages", "d", "--out", str(out)], capture_output=True, text=True,
                         cwd=tmp_path, env=dict(os.environ, SGLANG_USE_CPU_ENGINE="1"))
    report = out.read_text() if out.exists() else ""
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:] + report
    assert "## d. SGLang soft rollout" in report and "**ok**" in report
    parity = {m: re.search(rf"^\| {m} \| (\d+)/(\d+) \| ([^|]+) \|", report, re.M)
              for m in ("hard", "fixed", "adaptsoft")}
    for mode, row in parity.items():
        assert row is not None, (mode, report)
        same, total, loglik = int(row[1]), int(row[2]), float(row[3])
        assert same == total == 4, (mode, report)  # 2 prompts × 2 samples, every path equal
        assert loglik <= 1e-3, (mode, report)  # fp32 rounding only (tests/sglang_real tolerances)
    for mode in ("hard", "fixed", "adaptsoft"):  # the throughput table: positive tok/s per mode
        row = re.findall(rf"^\| {mode} \| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \|", report, re.M)
        assert row and float(row[0][0]) > 0 and float(row[0][2]) > 0, (mode, report)
