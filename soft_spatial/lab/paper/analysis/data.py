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
from soft_spatial.infra.run_dir import metrics_records, read_metrics

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
    """Per-step arrays ``step`` and ``keys`` from a ``metrics.jsonl`` (read by
    ``infra.run_dir.read_metrics``; steps without the first key are skipped). A line of another
    shape or a value that is not a number is an error naming the file and the line."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no metrics file (training writes "
                                f"<trainer.default_local_dir>/metrics.jsonl)")

    steps, cols = [], {k: [] for k in keys}
    for step in read_metrics(path):
        if keys[0] not in step:
            continue
        missing = [k for k in keys if k not in step]
        if missing:
            raise ValueError(f"{path}: step {step['step']} logs {keys[0]!r} but not {missing}")
        values = [step[k] for k in keys]
        bad = [k for k, v in zip(keys, values) if isinstance(v, bool) or not isinstance(v, (int, float))]
        if bad:
            line = [n for n, s, data in metrics_records(path) if s == step["step"] and bad[0] in data][-1]
            raise ValueError(f"{path}: line {line}: step {step['step']}: {bad[0]!r} is "
                             f"{step[bad[0]]!r}, not a number")
        steps.append(step["step"])
        for k, v in zip(keys, values):
            cols[k].append(float(v))
    if not steps:
        raise ValueError(f"{path}: no step logs {keys[0]!r} (a hard-mode run has no τ)")
    return {"step": np.asarray(steps), **{k: np.asarray(v, dtype=np.float64) for k, v in cols.items()}}
