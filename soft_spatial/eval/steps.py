"""Per-step analysis data of an evaluation, written beside ``samples.jsonl`` as ``steps.jsonl``.

One JSON line per sample, keyed like its ``samples.jsonl`` row (``benchmark``,
``question_index``, ``sample``), with the sample's L steps as little-endian base64 arrays:

* ``tau``     float32 [L]  the mixture temperature τ (0 at discrete steps);
* ``entropy`` float32 [L]  the normalised top-K entropy Ĥ (0 at discrete steps);
* ``token``   int32   [L]  the spine token (the emitted one);
* ``soft``    bits    [L]  numpy ``packbits`` of the soft flag;
* ``topk_ids`` int32  [L, K] the step's K candidates (the spine first; ``k`` = K);
* ``scores``  float32 [L, K] their scores (log p̃ at soft steps, 0 at discrete steps).

Files written before the candidates were recorded have no ``k``, ``topk_ids`` or ``scores``:
they still read, without those arrays.

About 16 characters per step (a JSON list of rounded numbers takes more and loses precision).
The runner writes a sample's steps before its ``samples.jsonl`` row, so a sample that is redone
after a crash may appear twice here: :func:`read_steps` keeps the last. ``python -m
soft_spatial.analysis`` reads this file (Figures 4, 6 and 7).
"""
from __future__ import annotations

import base64
from pathlib import Path

import numpy as np

from soft_spatial.infra.jsonl import read_jsonl

__all__ = ["STEPS", "steps_row", "decode_steps", "read_steps", "StepsKey"]

STEPS = "steps.jsonl"
StepsKey = tuple[str, int, int]
_ARRAYS = {"tau": "<f4", "entropy": "<f4", "token": "<i4"}
_CANDIDATES = {"topk_ids": "<i4", "scores": "<f4"}


def _b64(a: np.ndarray) -> str:
    return base64.b64encode(np.ascontiguousarray(a).tobytes()).decode("ascii")


def steps_row(benchmark: str, question_index: int, sample: int, trace) -> dict:
    """The ``steps.jsonl`` row of one sample from its :class:`~soft_spatial.softthink.SoftTrace`."""
    soft = trace.soft.cpu().numpy().astype(bool)
    return {"benchmark": benchmark, "question_index": int(question_index), "sample": int(sample),
            "n": int(soft.shape[0]),
            "tau": _b64(trace.tau.cpu().numpy().astype("<f4")),
            "entropy": _b64(trace.entropy.cpu().numpy().astype("<f4")),
            "token": _b64(trace.tokens.cpu().numpy().astype("<i4")),
            "soft": _b64(np.packbits(soft)),
            "k": int(trace.topk_ids.shape[1]),
            "topk_ids": _b64(trace.topk_ids.cpu().numpy().astype("<i4")),
            "scores": _b64(trace.scores.cpu().float().numpy().astype("<f4"))}


def decode_steps(row: dict, where: str = "steps row") -> dict[str, np.ndarray]:
    """Arrays ``tau``, ``entropy`` (float32), ``token`` (int32), ``soft`` (bool), each [L], and
    where the row has them ``topk_ids`` (int32) and ``scores`` (float32), each [L, K]."""
    try:
        n = int(row["n"])
        out = {k: np.frombuffer(base64.b64decode(row[k]), dtype=dt) for k, dt in _ARRAYS.items()}
        out["soft"] = np.unpackbits(np.frombuffer(base64.b64decode(row["soft"]),
                                                  dtype=np.uint8))[:n].astype(bool)
        if "k" in row:
            k = int(row["k"])
            for name, dt in _CANDIDATES.items():
                flat = np.frombuffer(base64.b64decode(row[name]), dtype=dt)
                if k <= 0 or flat.shape[0] != n * k:
                    raise ValueError(f"field {name!r} has {flat.shape[0]} values, n × k = {n} × {k}")
                out[name] = flat.reshape(n, k)
    except KeyError as e:
        raise ValueError(f"{where}: missing field {e.args[0]!r}") from None
    except (ValueError, TypeError) as e:
        raise ValueError(f"{where}: undecodable arrays ({e})") from None
    for k, v in out.items():
        if v.shape[0] != n:
            raise ValueError(f"{where}: field {k!r} has {v.shape[0]} steps, n = {n}")
    return out


def read_steps(path) -> dict[StepsKey, dict[str, np.ndarray]]:
    """All samples of a ``steps.jsonl`` by (benchmark, question_index, sample); a torn last line
    is dropped, any other bad line is an error naming the file and line."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no per-step data (evaluate with analysis_steps=true)")
    out: dict[StepsKey, dict[str, np.ndarray]] = {}
    for i, row in enumerate(read_jsonl(path, drop_torn_tail=True)):
        where = f"{path}: record {i + 1}"
        try:
            key = (str(row["benchmark"]), int(row["question_index"]), int(row["sample"]))
        except KeyError as e:
            raise ValueError(f"{where}: missing field {e.args[0]!r}") from None
        out[key] = decode_steps(row, where)
    return out
