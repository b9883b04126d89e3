"""The identity of an evaluation: everything its per-sample rows depend on.

`run_key` builds it as a JSON object: the model (resolved path and a weights fingerprint), the
controller (path and content hash), each benchmark's data (table file, its content hash, split,
and the content hash of every image file its questions read), the engine, mode and
soft-thinking settings, protocol, sampling (temperature, max_new_tokens, seed), ``batch_rows``
and the selection, ``samples``, ``limit`` and ``task_types``.

Why the batching and the selection: a row's noise is its own (its question's seed and its sample
index), but the rows decoded together change its floating-point path, hence its text. A batched
matmul's result for one row depends on the batch's size and on the padded length of its prompts
(the tiny test model's first-step logits for one question move by up to 1e-5 between a batch of
one, of two and of ten, even with the same prompt twice), and soft decoding feeds the difference
back: the next input is a mixture of embeddings, a continuous value that no token snaps back, so
the candidates' scores drift step by step until a near tie flips the spine token and the rest of
the chain follows (hard decoding showed no difference). ``batch_rows`` fixes how many rows a batch
holds (6 of 32 samples of the tiny model differed between batch_rows 32 and 4); the selection
fixes which: batches are consecutive runs of the questions a run asks for (``task_types``, then
``limit``), ``batch_rows // samples`` questions of ``samples`` rows each. So extending a run was
not exact (issue 55: 1 of 20 rows differed every time): with ``limit=2``, then no limit into the
same directory, questions 0-1 were decoded in a batch of 4 rows and 2-9 in one of 16, where a fresh
run decodes all 20 rows together; question 1's rows (fixed mode, samples=2, 64 new tokens) left
the fresh run's spine at steps 24 and 61, their scores already up to 3.6 apart. A larger
``samples`` (other rows per question and per batch) and another ``task_types`` (other
neighbours) did the same. Exactness cannot hold without decoding rows a run does not ask for, so
the selection joins the key: a run with another ``samples``, ``limit`` or ``task_types`` writes
into its own output directory (the default one names ``limit`` and ``task_types``). Within one
key a resumed run is exact: batches are cut from the questions the run asks for at the places a
fresh run cuts them, whichever are already done (`runner`); with the local engine, which decodes
the batches it is given (SGLang schedules its own, so its rows share the noise, not the rounding,
from run to run: docs/design.md §2.2).

It is stored as ``run_key.json`` in the output directory when a run starts; a later run into the
same directory resumes only if its key is equal, otherwise `check_run_key` refuses and lists what
differs. A field the recorded key lacks (a key written by a version that did not record it, e.g.
``batch_rows`` before issue 34, the selection before issue 55) counts as different: the run is
refused, the message says the field was not recorded, since the rows may have been made with
another value. A directory that holds no results (a run that failed before its first row, e.g.
at engine start) is not protected: a run with another key is accepted there and records its own
key.

Not in the key, because no row depends on them: the published reference rows, the model's name
in the tables, ``analysis_steps`` and the SGLang server layout.

Images: ``data.<benchmark>.images`` maps every image file of the benchmark's split (every
question's, not only those ``limit`` and ``task_types`` select: one output directory holds rows of
one version of the data) by its path relative to the data root to its sha256, so a corrected
image release (the same table, other pixels) is refused naming each changed image
(``data.omnispatial.images.Egocentric/12.png: <old> -> <new>``; a long list is cut after
`SHOWN_IMAGES` per benchmark). Images embedded in a table (parquet bytes, base64 cells) are hashed
with the table. A key recorded before images were (``data.<benchmark>.images`` absent) is
refused with a message saying so, in one line.

Every hashed file (model files, controller, tables, images) is hashed whole, every byte, with
sha256, through `infra/provenance.py` (the digests and their cache, shared with every keyed
output): a file is read once and re-read only when it changed. Cost of a first run: reading the
weights once (sha256 runs at about 1.4 GB/s on one core of the 2-core CPU the tests run on: ~12 s
for the 16 GB of an 8B model in bf16, plus the disk's read time when the files are not in the
page cache) and the images once (OmniSpatial-sized data, 1,533 files of 1.66 GB: 5.9 s measured on
that CPU under load, sha256 at 0.47 GB/s then, ~1.2 s at 1.4 GB/s; the loader has just decoded
every one of them, so they are in the page cache); a later run only stats each file (its cache
entry: 0.36 s for those 1,533).
"""
from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from soft_spatial.data.benchmarks import source_files
from soft_spatial.data.record import QuestionRecord
from soft_spatial.infra.provenance import (FINGERPRINT_SCHEME, SHA256_CACHE, Keyed,
                                           OutputKeyMismatch, differences, file_sha256,
                                           sha256_cache, tree_fingerprint)

__all__ = ["RUN_KEY", "RunKeyMismatch", "run_key", "check_run_key", "weights_fingerprint",
           "file_sha256", "sha256_cache", "SHA256_CACHE"]

RUN_KEY = "run_key.json"
#: a model directory's fingerprint is its tree's (infra/provenance.py)
weights_fingerprint = tree_fingerprint
#: top-level fields added to the key after run keys were first written: a recorded key without
#: one is refused (it differs), its message saying the field was not recorded
ADDED_FIELDS = ("batch_rows", "samples", "limit", "task_types")
#: changed images listed per benchmark in a refusal; the rest are counted
SHOWN_IMAGES = 5


class RunKeyMismatch(OutputKeyMismatch):
    """The output directory holds results of a different evaluation."""


def image_digests(root: str | Path, records: Sequence[QuestionRecord],
                  cache: dict[str, Any] | None = None) -> dict[str, str]:
    """sha256 of every image file ``records`` read, by its path relative to the data ``root`` (a
    directory, or a table file whose directory is meant): links resolved where the file lies
    inside the resolved root, else as the table wrote it (a Hugging Face hub cache's
    ``snapshots/<rev>/x.png``, a link into ``blobs/``); any other file keeps its absolute path.
    Images embedded in the table (decoded images, not files) are not listed."""
    base, written = Path(root).resolve(), Path(os.path.abspath(root))
    base, written = (base, written) if base.is_dir() else (base.parent, written.parent)
    digests: dict[str, str] = {}
    for record in records:
        for image in record.images:
            if not isinstance(image, Path):
                continue
            path, lexical = image.resolve(), Path(os.path.abspath(image))
            name = (path.relative_to(base).as_posix() if path.is_relative_to(base)
                    else lexical.relative_to(written).as_posix() if lexical.is_relative_to(written)
                    else str(path))
            if name not in digests:
                digests[name] = file_sha256(path, cache)
    return dict(sorted(digests.items()))


def run_key(cfg, records: Mapping[str, Sequence[QuestionRecord]]) -> dict[str, Any]:
    """The identity of the evaluation ``cfg`` (an `EvalConfig`), as a JSON-able dict; ``records``:
    every question of each benchmark's split (their images are hashed)."""
    model = Path(cfg.model_path).resolve()
    controller = Path(cfg.controller).resolve() if cfg.controller else None
    data = {}
    with sha256_cache() as cache:
        for bench in cfg.benchmarks:
            tables = [p.resolve() for p in source_files(bench, cfg.data[bench], cfg.split)]
            data[bench] = {"files": [str(t) for t in tables],
                           "sha256": [file_sha256(t, cache) for t in tables], "split": cfg.split,
                           "images": image_digests(cfg.data[bench], records[bench], cache)}
        fingerprint = weights_fingerprint(model, cache)
        controller_sha = file_sha256(controller, cache) if controller else None
    return {
        "model": {"path": str(model), "fingerprint": fingerprint,
                  "fingerprint_scheme": FINGERPRINT_SCHEME},
        "controller": ({"path": str(controller), "sha256": controller_sha}
                       if controller else None),
        "data": data,
        "engine": {"name": cfg.engine, "device": cfg.device, "dtype": cfg.dtype},
        "mode": cfg.soft_thinking.mode,
        "soft_thinking": asdict(cfg.soft_thinking),
        "protocol": cfg.protocol,
        # "top_k" here is the discrete steps' filter (sample_top_k), under its earlier name so
        # that the run keys of existing output directories still match
        "sampling": {"temperature": cfg.temperature, "top_k": cfg.sample_top_k,
                     "max_new_tokens": cfg.max_new_tokens, "seed": cfg.seed},
        "batch_rows": cfg.batch_rows,
        "samples": cfg.samples, "limit": cfg.limit, "task_types": cfg.task_types,
    }


def key_differences(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """`differences` of two run keys, each benchmark's images summed up: at most `SHOWN_IMAGES`
    changed images listed, the others counted; a key without images (an earlier version's) one
    line."""
    old, new = json.loads(json.dumps(old)), json.loads(json.dumps(new))
    lines = []
    for bench in sorted(set(old.get("data") or {}) | set(new.get("data") or {})):
        was = ((old.get("data") or {}).get(bench) or {}).pop("images", None)
        now = ((new.get("data") or {}).get(bench) or {}).pop("images", None)
        if was == now:
            continue
        if was is None or now is None:
            show = lambda d: "(absent)" if d is None else f"{len(d)} image files"  # noqa: E731
            lines.append(f"data.{bench}.images: {show(was)} -> {show(now)}")
            continue
        changed = differences({"data": {bench: {"images": was}}}, {"data": {bench: {"images": now}}})
        lines += changed[:SHOWN_IMAGES]
        if len(changed) > SHOWN_IMAGES:
            lines.append(f"data.{bench}.images: {len(changed) - SHOWN_IMAGES} more of "
                         f"{len(set(was) | set(now))} image files differ")
    return differences(old, new) + lines


class RunKeyed(Keyed):
    """An evaluation's output directory keyed by its `run_key` (``run_key.json`` inside it): a
    refusal lists `key_differences` and names the fields the recorded key lacks."""

    error = RunKeyMismatch

    def refusal(self, old: Mapping[str, Any], diff: list[str]) -> RunKeyMismatch:
        diff = key_differences(old, self.key)  # each benchmark's images summed up
        absent = [f for f in ADDED_FIELDS if f in self.key and f not in old]
        absent += [f"data.{b}.images" for b, d in self.key.get("data", {}).items()
                   if "images" in d and "images" not in (old.get("data") or {}).get(b, {})]
        note = (f"\n{', '.join(absent)}: not recorded in {self.key_path} (written by an earlier "
                f"version), so its rows may have been made with another value." if absent else "")
        return RunKeyMismatch(f"{self.output} holds results of a different evaluation; what differs "
                              f"(recorded -> requested):\n  " + "\n  ".join(diff) + note
                              + f"\n{self.hint}")


def check_run_key(out_dir: str | Path, key: dict[str, Any], results: str | Sequence[str],
                  write: bool = True) -> None:
    """Record ``key`` in a new output directory (unless ``write`` is false: a check only), accept
    an equal one, refuse anything else that holds results.

    ``results``: the name (or names) of the files a run appends its rows to. Refused: a
    directory whose ``run_key.json`` differs and that holds results (the message lists each
    difference; a field the recorded key lacks shows as ``(absent)`` and is said to be one the
    writing version did not record), and one that holds results but no run key (written by an
    earlier version). A ``run_key.json`` beside no results (a run that failed before its first
    row: at engine start, say) protects nothing: it is replaced by ``key``.
    """
    out = Path(out_dir)
    path = out / RUN_KEY
    names = [results] if isinstance(results, str) else list(results)
    held = [n for n in names if (out / n).is_file() and (out / n).stat().st_size]  # a torn line counts
    fresh = (f"To start fresh, choose another output_dir=... or delete {out}; to resume, run "
             f"with the settings recorded in {path}.")
    run = RunKeyed("the evaluation", out, json.loads(json.dumps(key)), at=path, hint=fresh, unkeyed=(
        f"{out / held[0]} was written without a run key ({RUN_KEY}), so the configuration that "
        f"produced it is unknown. {fresh}" if held else ""))
    if held:
        run.verdict()  # the same key, or refused
    elif write:
        run.record()
