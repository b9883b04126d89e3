"""The softness experiment's Phase 0 through its command at a tiny budget (``python -m
soft_spatial.lab.softness run budget=paths``): path data, the three warm starts (two-view, hard-only,
no-chain), the six gate evaluations and the gate table; a failed gate stops the run before GRPO;
the same command run again redoes nothing and writes the same table."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from soft_spatial.lab.softness.gates import GATE_EVALS

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_phase0_runs_the_gates_and_stops_before_grpo_then_reruns_as_a_no_op(tmp_path, monkeypatch,
                                                                             capsys):
    """The first run is the command itself; the second is its main in this process (it starts no
    stage: the command's own imports were most of its time)."""
    from soft_spatial.lab.softness.phase0 import main

    out = tmp_path / "paths"
    cmd = [sys.executable, "-m", "soft_spatial.lab.softness", "run", "budget=paths", f"out={out}",
           "data.train=12", "data.test=9", "model.hidden_size=32", "model.intermediate_size=64",
           "model.num_hidden_layers=1", "model.head_dim=16", "model.vision_hidden_size=16",
           "model.vision_depth=1", "warmstart.steps=2", "warmstart.batch_size=4",
           "eval.samples=1", "eval.max_new_tokens=8"]
    env = dict(os.environ, HF_HUB_OFFLINE="1", RAY_USAGE_STATS_ENABLED="0")
    first = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env, cwd=ROOT)
    assert first.returncode == 0, (first.stdout + first.stderr)[-4000:]
    for view in ("warmstart", "warmstart_hard", "warmstart_nochain"):
        cfg = json.loads((out / "models" / view / "warmstart.json").read_text())["config"]
        assert cfg["view"] == {"warmstart": "mix"}.get(view, view.removeprefix("warmstart_"))
    for name in GATE_EVALS:
        summary = json.loads((out / "eval" / f"gate_{name}" / "summary.json").read_text())
        assert summary["benchmarks"]["omnispatial"]["samples"] == 9
    gates = json.loads((out / "gates.json").read_text())
    assert [g["name"][:2] for g in gates["gates"]] == ["G1", "G2", "G3", "G4", "G5"]
    table = (out / "gates.md").read_text()
    # two training steps cannot track a path: G1 fails, and the protocol stops before GRPO
    assert not gates["passed"] and "stops the protocol before GRPO" in first.stdout
    assert not (out / "runs").exists()
    stamps = {p: p.stat().st_mtime_ns for p in (out / "eval").rglob("samples.jsonl")}
    assert cmd[1:4] == ["-m", "soft_spatial.lab.softness", "run"]
    for var in ("HF_HUB_OFFLINE", "RAY_USAGE_STATS_ENABLED"):
        monkeypatch.setenv(var, env[var])
    monkeypatch.chdir(ROOT)
    capsys.readouterr()
    monkeypatch.setattr(sys, "argv", ["soft_spatial.lab.softness", *cmd[4:]])  # as __main__ leaves it
    main()  # no SystemExit: exit 0
    again = capsys.readouterr().out
    assert "3 warm start mix: done" in again and "1 data: done" in again
    assert {p: p.stat().st_mtime_ns for p in (out / "eval").rglob("samples.jsonl")} == stamps
    assert (out / "gates.md").read_text() == table
