"""A training run's directory (``trainer.default_local_dir``): what the entry point checks and
prepares in it before Ray starts.

* `resume_step`: the step a run will resume from, found as verl finds it (0: a fresh start), but
  refused where verl would silently start again from step 0 and overwrite the run's checkpoints
  (a tracker naming a checkpoint that is gone) or stop late with a bare error (an empty or
  garbled tracker, a ``resume_from_path`` that is not there): `latest_step`, `step_folder`;
* `finished`: whether that step already reaches the run's budget, so a re-run trains nothing
  (verl 0.9.1's ``fit`` would train one more step: it tests the budget only after a step);
* `keep_metrics_until`: the metrics log (``metrics.jsonl``, verl's ``file`` logger, which appends
  through `compat.verl.trainer.append_file_logger`) keeps every step up to the resumed checkpoint; the
  steps after it, logged by a run killed before its next checkpoint and about to be recomputed,
  move to ``metrics.superseded.jsonl`` instead of appearing twice. Nothing is deleted.
* `read_metrics`, `metrics_records`: the one reader of ``metrics.jsonl`` (the learning
  experiment's report, the analysis' Fig. 5): one record per step, a line of another shape named
  by file and line.
"""
from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from soft_spatial.infra.atomic import write_text
from soft_spatial.infra.jsonl import read_jsonl

__all__ = ["resume_step", "latest_step", "step_folder", "checkpoint_steps", "MissingCheckpoint",
           "finished", "keep_metrics_until", "read_metrics", "metrics_records", "SUPERSEDED",
           "TRACKER"]

SUPERSEDED = "metrics.superseded.jsonl"
TRACKER = "latest_checkpointed_iteration.txt"  # verl's pointer to the run's latest checkpoint
_STEP = re.compile(r"global_step_(\d+)")


class MissingCheckpoint(FileNotFoundError):
    """The checkpoint a run would resume from is not there."""


def checkpoint_steps(ckpt_dir: str | os.PathLike) -> list[int]:
    """The steps of the ``global_step_N`` folders in ``ckpt_dir``, ascending."""
    path = Path(ckpt_dir)
    if not path.is_dir():
        return []
    return sorted(int(m[1]) for p in path.iterdir() if (m := _STEP.fullmatch(p.name)) and p.is_dir())


def _remaining(ckpt_dir: Path) -> str:
    steps = checkpoint_steps(ckpt_dir)
    if not steps:
        return "no global_step_N folder is left; train into a new trainer.default_local_dir"
    return (f"the folders left are {', '.join(f'global_step_{n}' for n in steps)}: resume from one with "
            f"trainer.resume_mode=resume_path trainer.resume_from_path={ckpt_dir}/global_step_{steps[-1]}, "
            f"or restore the missing one")


def latest_step(ckpt_dir: str | os.PathLike) -> int | None:
    """The step verl's tracker (``latest_checkpointed_iteration.txt``) in ``ckpt_dir`` names, None
    when there is none. An empty or garbled tracker is a ``ValueError`` naming it and the run."""
    tracker = Path(ckpt_dir) / TRACKER
    if not tracker.is_file():
        return None
    text = tracker.read_bytes()[:200].decode("utf-8", errors="replace").strip()
    if not (text.isascii() and text.isdigit()):
        raise ValueError(
            f"{tracker}: expected the step of the run's latest checkpoint (an integer, as verl writes "
            f"it), found {text!r}: the run {ckpt_dir} cannot tell which checkpoint to resume from; "
            + _remaining(Path(ckpt_dir)))
    return int(text)


def step_folder(resume_from_path: str | os.PathLike) -> tuple[Path, int]:
    """The ``global_step_N`` folder ``trainer.resume_from_path`` names (relative to the working
    directory, as verl reads it) and its step N; errors name the setting."""
    folder = Path(os.path.abspath(str(resume_from_path).rstrip("/")))
    m = _STEP.fullmatch(folder.name)
    if not m:
        raise ValueError(f"trainer.resume_mode=resume_path needs trainer.resume_from_path="
                         f".../global_step_N, got {str(resume_from_path)!r}")
    if not folder.is_dir():
        raise MissingCheckpoint(f"trainer.resume_from_path={resume_from_path}: no such checkpoint "
                                f"folder ({folder})")
    return folder, int(m[1])


def resume_step(ckpt_dir: str | os.PathLike, resume_mode: str, resume_from_path: str | None = None) -> int:
    """The global step a run in ``ckpt_dir`` resumes from (verl's rules: ``disable`` starts at 0,
    ``auto`` takes the latest checkpoint if any, ``resume_path`` the named ``global_step_N``).

    Where verl 0.9.1 would start again from step 0 because the tracker names a checkpoint that is
    gone (deleted to free space, a partial copy) and then overwrite the run's remaining
    checkpoints as it saves, this refuses (`MissingCheckpoint`, naming the missing folder and
    the ones left); an empty or garbled tracker is a ``ValueError`` naming it."""
    if resume_mode == "disable":
        return 0
    if resume_mode == "resume_path":
        if not resume_from_path:
            raise ValueError("trainer.resume_mode=resume_path needs trainer.resume_from_path="
                             ".../global_step_N, got None")
        return step_folder(resume_from_path)[1]
    # verl's find_latest_ckpt_path, read here: importing verl's checkpoint module pulls in its
    # engines, which need the CPU platform registered (in the workers, not in the entry point)
    step = latest_step(ckpt_dir)
    if step is None:
        return 0
    folder = Path(ckpt_dir) / f"global_step_{step}"
    if not folder.is_dir():
        raise MissingCheckpoint(
            f"{Path(ckpt_dir) / TRACKER} names step {step}, but its checkpoint {folder} is missing: "
            f"verl would train the run again from step 0 and overwrite its checkpoints; "
            + _remaining(Path(ckpt_dir)))
    return step


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


def metrics_records(path: str | os.PathLike) -> Iterator[tuple[int, int, dict[str, Any]]]:
    """``(line, step, data)`` for each line of verl's file logger (``{"step": N, "data": {...}}``)
    in ``path``, in file order; a torn last line (a run killed mid-write) is dropped. A line that is
    not JSON, or not of that shape, is a ``ValueError`` naming the file and the line."""
    for number, row in read_jsonl(path, drop_torn_tail=True, numbered=True):
        step = row.get("step") if isinstance(row, dict) else None
        data = row.get("data") if isinstance(row, dict) else None
        if not isinstance(step, int) or isinstance(step, bool) or not isinstance(data, dict):
            raise ValueError(f"{path}: line {number}: not a metrics line of verl's file logger "
                             f"({{\"step\": <integer>, \"data\": {{...}}}}): {json.dumps(row)[:120]}")
        yield number, step, data


def read_metrics(path: str | os.PathLike) -> list[dict[str, Any]]:
    """The steps of a ``metrics.jsonl`` as ``{"step": N, **metrics}``, by step; lines of one step
    are merged, a later line's values winning (a resumed run's step logged again, the validation
    line verl logs at the resumed step). A missing file has no steps; errors as
    `metrics_records`."""
    if not Path(path).is_file():
        return []
    by_step: dict[int, dict[str, Any]] = {}
    for _, step, data in metrics_records(path):
        by_step.setdefault(step, {"step": step}).update(data)
    return [by_step[s] for s in sorted(by_step)]
