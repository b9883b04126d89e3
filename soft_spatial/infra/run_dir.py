"""A training run's directory (``trainer.default_local_dir``): what the entry point checks and
prepares in it before Ray starts.

* `resume_step`: the step a run will resume from, found as verl finds it (0: a fresh start);
* `finished`: whether that step already reaches the run's budget, so a re-run trains nothing
  (verl 0.9.1's ``fit`` would train one more step: it tests the budget only after a step);
* `keep_metrics_until`: the metrics log (``metrics.jsonl``, verl's ``file`` logger, which appends
  through `compat.verl.trainer.append_file_logger`) keeps every step up to the resumed checkpoint; the
  steps after it, logged by a run killed before its next checkpoint and about to be recomputed,
  move to ``metrics.superseded.jsonl`` instead of appearing twice. Nothing is deleted.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from soft_spatial.infra.atomic import write_text

__all__ = ["resume_step", "finished", "keep_metrics_until", "SUPERSEDED"]

SUPERSEDED = "metrics.superseded.jsonl"


def resume_step(ckpt_dir: str | os.PathLike, resume_mode: str, resume_from_path: str | None = None) -> int:
    """The global step a run in ``ckpt_dir`` resumes from (verl's rules: ``disable`` starts at 0,
    ``auto`` takes the latest checkpoint if any, ``resume_path`` the named ``global_step_N``)."""
    if resume_mode == "disable":
        return 0
    if resume_mode == "resume_path":
        if not resume_from_path or "global_step_" not in str(resume_from_path):
            raise ValueError(f"trainer.resume_mode=resume_path needs trainer.resume_from_path="
                             f".../global_step_N, got {resume_from_path!r}")
        return int(str(resume_from_path).rstrip("/").split("global_step_")[-1])
    # verl's find_latest_ckpt_path, read here: importing verl's checkpoint module pulls in its
    # engines, which need the CPU platform registered (in the workers, not in the entry point)
    tracker = Path(ckpt_dir) / "latest_checkpointed_iteration.txt"
    if not tracker.is_file():
        return 0
    step = int(tracker.read_text().strip())
    return step if (Path(ckpt_dir) / f"global_step_{step}").exists() else 0


def finished(step: int, total_training_steps: int | None, ckpt_dir) -> str | None:
    """A note for the user when a run resuming from ``step`` has nothing left to train (its
    checkpoint reached ``total_training_steps``); None otherwise or when the budget is unknown."""
    if total_training_steps is None or step < int(total_training_steps):
        return None
    return (f"{ckpt_dir}: finished: the latest checkpoint is step {step}, "
            f"trainer.total_training_steps={total_training_steps}; nothing to train (raise "
            f"trainer.total_training_steps to train further)")


def keep_metrics_until(path: str | os.PathLike, step: int) -> int:
    """Keep the lines of ``path`` with ``step <= step``; append the others (and a torn last line)
    to ``metrics.superseded.jsonl`` beside it. Returns the number of lines moved. The log is
    rewritten atomically, and only when something moves."""
    path = Path(path)
    if not path.exists():
        return 0
    keep, moved = [], []
    for line in path.read_text(encoding="utf-8").splitlines(keepends=True):
        if not line.strip():
            continue
        try:
            logged = int(json.loads(line)["step"])
        except (ValueError, KeyError, TypeError):
            logged = None  # a torn line: the run died mid-write
        (keep if logged is not None and logged <= step else moved).append(line)
    if moved:
        with open(path.with_name(SUPERSEDED), "a", encoding="utf-8") as f:
            f.writelines(line if line.endswith("\n") else line + "\n" for line in moved)
            f.flush()
            os.fsync(f.fileno())
        write_text(path, "".join(keep))
    return len(moved)
