"""Inputs of the analyses: an evaluation directory (``samples.jsonl`` + ``steps.jsonl`` +
``summary.json``, written by ``python -m soft_spatial.eval``) and a training run's
``metrics.jsonl`` (verl's file logger)."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from soft_spatial.eval.runner import RESULTS, read_results
from soft_spatial.eval.steps import STEPS, read_steps

__all__ = ["Trace", "load_traces", "load_metrics", "eval_model_path"]


@dataclass
class Trace:
    """One evaluated sample: its ``samples.jsonl`` row and its per-step arrays."""

    benchmark: str
    question_index: int
    sample: int
    correct: bool
    row: dict
    tau: np.ndarray  # [L] float32
    entropy: np.ndarray  # [L]
    token: np.ndarray  # [L] int32
    soft: np.ndarray  # [L] bool

    @property
    def soft_tau(self) -> np.ndarray:
        return self.tau[self.soft].astype(np.float64)

    @property
    def soft_entropy(self) -> np.ndarray:
        return self.entropy[self.soft].astype(np.float64)


def load_traces(eval_dir, benchmark: str | None = None) -> list[Trace]:
    """Samples of ``eval_dir`` joined with their steps (samples without steps are skipped and
    counted in a warning), optionally of one benchmark."""

    eval_dir = Path(eval_dir)
    if not (eval_dir / RESULTS).is_file():
        raise FileNotFoundError(f"{eval_dir / RESULTS}: not an evaluation directory "
                                f"(python -m soft_spatial.eval output_dir=...)")
    steps = read_steps(eval_dir / STEPS)
    out, missing = [], 0
    for i, row in enumerate(read_results(eval_dir / RESULTS)):
        try:
            key = (row["benchmark"], int(row["question_index"]), int(row["sample"]))
            correct = bool(row["correct"])
        except KeyError as e:
            raise ValueError(f"{eval_dir / RESULTS}: record {i + 1} has no field "
                             f"{e.args[0]!r}") from None
        if benchmark is not None and key[0] != benchmark:
            continue
        st = steps.get(key)
        if st is None:
            missing += 1
            continue
        out.append(Trace(*key, correct, row, st["tau"], st["entropy"], st["token"], st["soft"]))
    if missing:
        import warnings
        warnings.warn(f"{eval_dir}: {missing} samples have no per-step data (evaluated before "
                      f"steps.jsonl existed, or with analysis_steps=false)", stacklevel=2)
    if not out:
        what = f" of benchmark {benchmark!r}" if benchmark else ""
        raise ValueError(f"{eval_dir}: no samples{what} with per-step data")
    return out


def eval_model_path(eval_dir) -> str | None:
    """The model directory recorded in ``summary.json`` (for its tokenizer), if any."""
    path = Path(eval_dir) / "summary.json"
    if not path.is_file():
        return None
    return json.loads(path.read_text()).get("config", {}).get("model")


def load_metrics(path, keys=("soft/tau_mean", "soft/tau_min", "soft/tau_max")
                 ) -> dict[str, np.ndarray]:
    """Per-step arrays ``step`` and ``keys`` from a ``metrics.jsonl`` (lines without the first
    key, e.g. validation-only lines, are skipped)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no metrics file (training writes "
                                f"<trainer.default_local_dir>/metrics.jsonl)")

    steps, cols = [], {k: [] for k in keys}
    for i, rec in enumerate(read_results(path)):
        data = rec.get("data", rec)
        if keys[0] not in data:
            continue
        missing = [k for k in keys if k not in data]
        if missing:
            raise ValueError(f"{path}: record {i + 1} has {keys[0]!r} but not {missing}")
        steps.append(int(rec.get("step", len(steps) + 1)))
        for k in keys:
            cols[k].append(float(data[k]))
    if not steps:
        raise ValueError(f"{path}: no step logs {keys[0]!r} (a hard-mode run has no τ)")
    order = np.argsort(steps, kind="stable")
    out = {"step": np.asarray(steps)[order]}
    out.update({k: np.asarray(v)[order] for k, v in cols.items()})
    return out
