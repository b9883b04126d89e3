"""A learning stage's child process (soft_spatial/lab/learning/stage_child.py): its command and
output appended to its log, a failure raised with the log's end, the prefixed lines of several logs
echoed in order, one line per finished training step."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from soft_spatial.lab.learning.stage_child import StageFailed, follow_log, follow_metrics, run_logged


class Ended:
    """A child that has ended (``poll`` not None): a follower reads once and returns."""

    def poll(self):
        return 0


def test_a_command_appends_to_its_log_and_a_failure_raises_with_the_log_end(tmp_path):
    env = dict(os.environ)
    run_logged(tmp_path / "logs", "a", [sys.executable, "-c", "print('first')"], env, tmp_path)
    with pytest.raises(StageFailed, match=r"(?s)b failed \(exit 3\); log .*b\.log:.*to stderr"):
        run_logged(tmp_path / "logs", "b", [sys.executable, "-c",
                                           "import sys; print('to stderr', file=sys.stderr); sys.exit(3)"],
                   env, tmp_path)
    run_logged(tmp_path / "logs", "a", [sys.executable, "-c", "print('second')"], env, tmp_path)
    lines = (tmp_path / "logs/a.log").read_text().splitlines()
    assert [ln for ln in lines if ln and not ln.startswith("$ ")] == ["first", "second"]
    assert sum(ln.startswith(f"$ {sys.executable} -c") for ln in lines) == 2


def test_a_followed_child_runs_in_its_directory_and_the_follower_sees_it(tmp_path):
    seen = []
    run_logged(tmp_path / "logs", "c", [sys.executable, "-c", "import os; print(os.getcwd())"],
               dict(os.environ), tmp_path, follow=lambda child: seen.append(child.pid))
    assert len(seen) == 1 and str(tmp_path) in (tmp_path / "logs/c.log").read_text()


class Writes:
    """A child that writes ``lines`` to its logs, then ends (its first ``poll``)."""

    def __init__(self, lines: dict[Path, str]):
        self.lines = lines

    def poll(self):
        for log, text in self.lines.items():
            with log.open("a") as f:
                f.write(text)
        return 0


def test_prefixed_whole_lines_of_several_logs_are_echoed_in_order(tmp_path):
    a, b, missing = tmp_path / "a.log", tmp_path / "b.log", tmp_path / "none.log"
    a.write_text("step 0, before the child\n")  # not echoed
    said = []
    follow_log(said.append, Writes({a: "step 1\nnoise\nstep 2\nstep 3 (no newline yet)",
                                    b: "step 9\n"}), [a, missing, b], "step")
    assert said == ["  step 1", "  step 2", "  step 9"]


def test_each_finished_training_step_is_said_once(tmp_path):
    metrics = tmp_path / "metrics.jsonl"
    rows = [{"step": 1, "critic/score/mean": 0.25, "reward/acc_mean": 0.5},
            {"step": 2, "critic/score/mean": 0.5, "reward/acc_mean": 0.75, "soft/tau_min": 0.4,
             "soft/tau_max": 0.9}]
    metrics.write_text("".join(json.dumps({"step": r.pop("step"), "data": r}) + "\n" for r in rows))
    said = []
    follow_metrics(said.append, Ended(), metrics, "adaptsoft", 2)
    assert [s.split(" (")[0] for s in said] == [
        "  adaptsoft step 1/2: reward 0.250, acc 0.500",
        "  adaptsoft step 2/2: reward 0.500, acc 0.750  tau 0.40..0.90"]
