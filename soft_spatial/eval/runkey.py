"""The identity of an evaluation: everything its per-sample rows depend on.

`run_key` builds it as a JSON object: the model (resolved path and a weights fingerprint), the
controller (path and content hash), each benchmark's data (table file, its content hash, split),
the engine, mode and soft-thinking settings, protocol, sampling (temperature, max_new_tokens,
seed). It is stored as ``run_key.json`` in the output directory when a run starts; a later run
into the same directory resumes only if its key is equal, otherwise `check_run_key` refuses and
lists what differs.

Not in the key, because no row depends on them: ``samples``, ``limit`` and ``task_types`` (row (question, j)
depends only on the question's seed and j, so a larger value extends a run and a smaller one
reports only the rows it asked for), ``batch_rows``, the published reference rows, and the SGLang
server layout. Images are not hashed (the table file and the model are).
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from soft_spatial.atomic import write_text
from soft_spatial.data.benchmarks import source_files

__all__ = ["RUN_KEY", "RunKeyMismatch", "run_key", "check_run_key", "weights_fingerprint",
           "file_sha256"]

RUN_KEY = "run_key.json"
_WHOLE_FILE = 4 << 20  # files up to this size are hashed whole, larger ones by size, head, tail
_EDGE = 1 << 20


class RunKeyMismatch(ValueError):
    """The output directory holds results of a different evaluation."""


def file_sha256(path: Path) -> str:
    """sha256 of a file's content."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def weights_fingerprint(model_dir: str | Path) -> str:
    """A content fingerprint of a model directory, cheap for large weights.

    Every file counts by name. Files up to 4 MiB (config, tokenizer, chat template, safetensors
    index) are hashed whole; larger ones (weight shards) by size and their first and last MiB:
    the safetensors header names every tensor's shape and offset, and the tail holds weights,
    which any fine-tune changes.
    """
    root = Path(model_dir)
    h = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        rel = path.relative_to(root).as_posix()
        if any(part.startswith(".") for part in path.relative_to(root).parts):
            continue  # hidden files (caches, locks) do not define a model
        size = path.stat().st_size
        h.update(f"{rel}\0{size}\0".encode())
        with open(path, "rb") as f:
            if size <= _WHOLE_FILE:
                h.update(f.read())
            else:
                h.update(f.read(_EDGE))
                f.seek(size - _EDGE)
                h.update(f.read(_EDGE))
    return h.hexdigest()


def run_key(cfg) -> dict[str, Any]:
    """The identity of the evaluation ``cfg`` (an `EvalConfig`), as a JSON-able dict."""
    model = Path(cfg.model_path).resolve()
    controller = Path(cfg.controller).resolve() if cfg.controller else None
    data = {}
    for bench in cfg.benchmarks:
        tables = [p.resolve() for p in source_files(bench, cfg.data[bench], cfg.split)]
        data[bench] = {"files": [str(t) for t in tables],
                       "sha256": [file_sha256(t) for t in tables], "split": cfg.split}
    return {
        "model": {"path": str(model), "fingerprint": weights_fingerprint(model)},
        "controller": ({"path": str(controller), "sha256": file_sha256(controller)}
                       if controller else None),
        "data": data,
        "engine": {"name": cfg.engine, "device": cfg.device, "dtype": cfg.dtype},
        "mode": cfg.soft_thinking.mode,
        "soft_thinking": asdict(cfg.soft_thinking),
        "protocol": cfg.protocol,
        "sampling": {"temperature": cfg.temperature, "top_k": cfg.top_k,
                     "max_new_tokens": cfg.max_new_tokens, "seed": cfg.seed},
    }


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for k, v in value.items():
            out.update(_flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    return {prefix: value}


def differences(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """``"key: old -> new"`` for every leaf that differs (dotted keys)."""
    a, b = _flatten(old), _flatten(new)
    show = lambda d, k: d[k] if k in d else "(absent)"  # noqa: E731
    return [f"{k}: {show(a, k)} -> {show(b, k)}" for k in sorted(set(a) | set(b))
            if k not in a or k not in b or a[k] != b[k]]


def check_run_key(out_dir: str | Path, key: dict[str, Any], results: str) -> None:
    """Record ``key`` in a new output directory, accept an equal one, refuse anything else.

    Refused: a directory whose ``run_key.json`` differs (the message lists each difference), and
    one that holds results (``results``) but no run key (written by an earlier version).
    """
    out = Path(out_dir)
    path = out / RUN_KEY
    fresh = (f"To start fresh, choose another output_dir=... or delete {out}; to resume, run "
             f"with the settings recorded in {path}.")
    key = json.loads(json.dumps(key))  # the JSON view (tuples become lists)
    if path.exists():
        try:
            old = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise RunKeyMismatch(f"{path} is not valid JSON ({exc}). {fresh}") from exc
        diff = differences(old, key)
        if diff:
            raise RunKeyMismatch(
                f"{out} holds results of a different evaluation; what differs (recorded -> "
                f"requested):\n  " + "\n  ".join(diff) + f"\n{fresh}")
        return
    if (out / results).exists() and (out / results).stat().st_size:
        raise RunKeyMismatch(f"{out / results} was written without a run key ({RUN_KEY}), so "
                             f"the configuration that produced it is unknown. {fresh}")
    write_text(path, json.dumps(key, indent=2) + "\n")
