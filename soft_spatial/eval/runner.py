"""Evaluation loop: benchmarks → prompts → engine → extracted letters → JSONL, JSON, tables.

A run holds the output directory's lock (`soft_spatial.infra.dirlock`: one writer per directory) and
is keyed to its configuration (`runkey`: model, controller, data tables and images, mode,
protocol, sampling, batch_rows, samples, limit, task_types); resuming into a directory written
with a different configuration is refused, unless it holds no rows yet (a run that failed before
its first result, e.g. at engine start, leaves a directory the corrected command uses). Rows are
keyed by (benchmark, question key, sample), never by position, and appended to ``samples.jsonl``
after every batch of questions (flushed and fsynced), so an interrupted run resumes where it
stopped: finished (question, sample) pairs are never redone. The batches are cut from the
questions the run asks for at fixed places (``batch_rows // samples`` questions each, the first
from the first question), and a resumed run decodes of each batch the questions it lacks: a run
resumed at a batch's end decodes the very batches a fresh run does, hence the same rows (a row's
text depends on the rows decoded with it: `runkey`). ``summary.json`` and one ``<benchmark>.md``
table per benchmark are rebuilt (atomically) at the end of every run. A prompt longer than the
engine accepts is skipped and reported with its question id (retried, alone, by a resumed run).
With ``analysis_steps`` every sample's per-step τ, normalised entropy, spine token and soft flag go
to ``steps.jsonl`` (:mod:`.steps`, read by ``python -m soft_spatial.analysis``). ``task_types``
evaluates a task-type subset (question indices stay those of the full benchmark); ``sample_top_k``
filters every discrete step's sampling (hard mode: the whole response, Table 5's decoding top-k 5;
soft modes: the answer after ``</think>``).
"""
from __future__ import annotations

import contextlib
import json
import os
import sys
import warnings
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from soft_spatial.data import BENCHMARKS, SkippedRecord, build_messages, extract_answer, load_benchmark
from soft_spatial.data.record import QuestionRecord
from soft_spatial.data.subsets import normalise_task_types, subset_indices
from soft_spatial.engines.base import PromptTooLongError
from soft_spatial.engines.local import LocalEngine
from soft_spatial.eval.report import EXCLUDED_FROM_OVERALL, group_rows, markdown_table, summarize
from soft_spatial.eval.runkey import check_run_key, run_key
from soft_spatial.eval.steps import STEPS, steps_row
from soft_spatial.infra.atomic import write_text
from soft_spatial.infra.dirlock import DirLock, check_dir_path
from soft_spatial.infra.jsonl import read_jsonl
from soft_spatial.softthink import AdaptSoft, SamplingConfig, SoftThinkingConfig, check_field_types

__all__ = ["EvalConfig", "evaluate", "read_results"]

RESULTS = "samples.jsonl"


@dataclass
class EvalConfig:
    """Typed evaluation settings (built from configs/eval.yaml)."""

    benchmarks: list[str]
    data: dict[str, str]
    model_path: str
    soft_thinking: SoftThinkingConfig
    output_dir: str
    model_name: str = "model"
    controller: str | None = None
    engine: str = "local"
    samples: int = 8
    temperature: float = 0.6
    max_new_tokens: int = 3072
    protocol: str = "ours"
    limit: int | None = None
    split: str | None = None
    seed: int = 0
    device: str = "cpu"
    dtype: str = "float32"
    batch_rows: int = 64
    sglang: dict[str, Any] = field(default_factory=dict)  # ServerArgs keywords (engine=sglang)
    published: dict[str, list] = field(default_factory=dict)
    sample_top_k: int = 5
    """Discrete steps sample from the top-k (Table 5; 0 = full vocabulary). Not K, the mixture's
    candidates: that is ``soft_thinking.top_k``."""
    task_types: list[str] | None = None  # a task-type subset (None = every question)
    analysis_steps: bool = True  # write steps.jsonl

    def __post_init__(self):
        self.task_types = normalise_task_types(self.task_types)
        check_field_types(self)  # temperature=abc: an error naming the field, not a TypeError
        if self.sample_top_k < 0:
            raise ValueError(f"sample_top_k must be >= 0 (0 = off), got {self.sample_top_k}")
        if self.protocol not in ("ours", "official"):
            raise ValueError(f"protocol must be 'ours' or 'official', got {self.protocol!r}")
        if self.engine not in ("local", "sglang"):
            raise ValueError(f"engine must be 'local' or 'sglang', got {self.engine!r}")
        if self.samples < 1:
            raise ValueError(f"samples must be >= 1, got {self.samples}")
        if self.limit is not None and self.limit < 1:
            raise ValueError(f"limit must be >= 1 (or null for every question), got {self.limit}")
        if not self.temperature > 0:
            raise ValueError(f"temperature must be > 0, got {self.temperature}")
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.batch_rows < 1:
            raise ValueError(f"batch_rows must be >= 1 (rows decoded together), got {self.batch_rows}")
        if not self.benchmarks:
            raise ValueError(f"benchmarks is empty; name at least one of {', '.join(BENCHMARKS)}")
        unknown = [b for b in self.benchmarks if b not in BENCHMARKS]
        if unknown:
            raise ValueError(f"benchmarks: unknown benchmark {', '.join(map(repr, unknown))}; the "
                             f"valid ones are {', '.join(BENCHMARKS)}")
        missing = [b for b in self.benchmarks if b not in self.data]
        if missing:
            raise ValueError(f"no data root configured for {missing} (set data.<name>=DIR)")
        if self.soft_thinking.mode == "adaptsoft" and not self.controller:
            raise ValueError("mode=adaptsoft needs controller=<AdaptSoft checkpoint>")
        if self.controller and not Path(self.controller).is_file():
            raise FileNotFoundError(f"controller checkpoint {self.controller} does not exist")


def read_results(path: Path) -> list[dict]:
    """Rows of a results JSONL; a torn last line (crash mid-write) is dropped."""
    return read_jsonl(path, drop_torn_tail=True) if Path(path).exists() else []


def _drop_torn_tail(path: Path) -> None:
    """Cut a torn last line (a crash mid-write) in place, so appends start on a fresh line."""
    if not path.exists():
        return
    with open(path, "rb+") as f:
        data = f.read()
        end = data.rfind(b"\n") + 1
        if end < len(data):
            f.truncate(end)
            f.flush()
            os.fsync(f.fileno())


def _make_engine(cfg: EvalConfig):
    import torch
    if cfg.engine == "sglang":  # imported only here: it needs the sglang package
        from soft_spatial.engines.sglang.engine import SGLangEngine
        return SGLangEngine(cfg.model_path, cfg.soft_thinking, controller=cfg.controller,
                            seed=cfg.seed, server_args=cfg.sglang)
    state = AdaptSoft.read_checkpoint(cfg.controller) if cfg.controller else None
    return LocalEngine.from_pretrained(cfg.model_path, device=cfg.device,
                                       dtype=getattr(torch, cfg.dtype), controller=state,
                                       max_batch_rows=cfg.batch_rows)


def _tau_stats(trace) -> dict:
    tau = trace.tau[trace.soft]
    if tau.numel() == 0:
        return {"tau_mean": None, "tau_std": None, "tau_min": None, "tau_max": None}
    return {"tau_mean": float(tau.mean()), "tau_std": float(tau.std()) if tau.numel() > 1 else 0.0,
            "tau_min": float(tau.min()), "tau_max": float(tau.max())}


@dataclass
class Selection:
    """One benchmark's questions for a run: every record of its split (loaded and checked: images
    verified, ids unique, at least one record), the indices of those this run asks for
    (``task_types``, then ``limit``) and the records the loader left out (`SkippedRecord`: an
    ambiguous gold answer), each as its warning's message."""

    records: list[QuestionRecord]
    indices: list[int]
    left_out: list[str]


def select_records(cfg: EvalConfig) -> dict[str, Selection]:
    """Per benchmark, its `Selection`. Each record a loader leaves out is printed as a warning on
    stderr, and counted in the summary (``left_out``)."""
    selected = {}
    for bench in cfg.benchmarks:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", SkippedRecord)
            records = load_benchmark(bench, cfg.data[bench], cfg.split)
        left_out = []
        for w in caught:
            if issubclass(w.category, SkippedRecord):
                left_out.append(str(w.message))
                print(f"warning: {bench}: {w.message}", file=sys.stderr)
            else:  # not ours to count: shown as Python would have shown it
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
        indices = subset_indices(records, cfg.task_types, where=f"{bench} task_types")
        selected[bench] = Selection(records, indices[: cfg.limit] if cfg.limit is not None else indices,
                                    left_out)
    return selected


def _write_if_changed(path: Path, text: str) -> None:
    """Write ``text`` atomically unless ``path`` holds it already (a re-run of a finished run
    leaves every file as it was)."""
    if not (path.is_file() and path.read_text(encoding="utf-8") == text):
        write_text(path, text)


def write_record(out: Path, record: dict[str, str] | None) -> None:
    """Write the files of ``record`` (path under ``out`` -> text)."""
    for rel, text in (record or {}).items():
        _write_if_changed(out / rel, text)


def check_output_dir(cfg: EvalConfig) -> None:
    """Refuse an ``output_dir`` that is a file, and one inside ``model.path``: the model's
    fingerprint (`runkey`) covers every file of its directory, so the evaluation's own rows would
    change it and its next run would be refused as another model's. Reads only."""
    check_dir_path(cfg.output_dir, "output_dir")
    out, model = Path(cfg.output_dir).resolve(), Path(cfg.model_path).resolve()
    if out == model or out.is_relative_to(model):
        raise ValueError(f"output_dir={cfg.output_dir} lies inside model.path={cfg.model_path}: the "
                         f"evaluation's files would become part of the model's fingerprint (its run "
                         f"key), and the next run into it would be refused as another model's; "
                         f"choose an output_dir outside the model directory (nothing was written)")


def evaluate(cfg: EvalConfig, engine=None, progress: bool = True,
             record: dict[str, str] | None = None) -> dict[str, dict]:
    """Run (or resume) the evaluation; returns the summary per benchmark. An engine made here
    (none is made when everything is done) is closed here, on errors too.

    A refused run changes nothing: the data and the run key are checked before the output
    directory is created or locked; ``record`` (path under the output directory -> text: the
    command's configuration) is written only once the run is accepted."""
    out = Path(cfg.output_dir)
    check_output_dir(cfg)
    selected = select_records(cfg)
    key = run_key(cfg, {bench: sel.records for bench, sel in selected.items()})
    # the rows' files: a directory without a byte in them (a run that failed before its first
    # row, at engine start say) holds nothing to protect, and takes this run's key
    results = (RESULTS, STEPS)
    check_run_key(out, key, results, write=False)  # refuse before the lock creates anything
    with DirLock(out, "evaluation output directory"):
        check_run_key(out, key, results)  # again: another run may have written in between
        write_record(out, record)
        results_path = out / RESULTS
        _drop_torn_tail(results_path)
        _drop_torn_tail(results_path.with_name(STEPS))
        done = {(r["benchmark"], r["question_key"], r["sample"])
                for r in read_results(results_path)}
        skipped: dict[str, list[str]] = {}
        owned = None
        try:
            for bench, sel in selected.items():
                records, indices = sel.records, sel.indices
                todo = {i for i in indices
                        if any((bench, records[i].key, j) not in done for j in range(cfg.samples))}
                if not todo:
                    continue
                if engine is None:
                    engine = owned = _make_engine(cfg)
                skipped[bench] = _run_benchmark(cfg, bench, records, indices, todo, engine, done,
                                                results_path, progress)
        finally:
            if owned is not None:
                owned.close()
        return write_reports(cfg, read_results(results_path),
                             {b: [sel.records[i] for i in sel.indices] for b, sel in selected.items()},
                             skipped, {b: sel.left_out for b, sel in selected.items()})


def _generate(engine, prompts: list, idx: list[int], records, skipped: list[str], **kw):
    """``engine.generate`` on the prompts of questions ``idx``; a prompt the engine finds too
    long is dropped (its question key added to ``skipped``) and the rest retried."""
    while idx:
        try:
            return idx, engine.generate(prompts, seeds=[kw["seed"] + i for i in idx],
                                        **{k: v for k, v in kw.items() if k != "seed"})
        except PromptTooLongError as e:
            skipped.append(records[idx[e.index]].key)
            idx, prompts = idx[:e.index] + idx[e.index + 1:], prompts[:e.index] + prompts[e.index + 1:]
    return idx, []


def batches(indices: Sequence[int], cfg: EvalConfig) -> list[list[int]]:
    """The batches of a run's questions ``indices`` (in order): ``batch_rows // samples``
    questions each (at least one), cut at the same places in every run of one key."""
    per_batch = max(1, cfg.batch_rows // cfg.samples)
    return [list(indices[s:s + per_batch]) for s in range(0, len(indices), per_batch)]


def _run_benchmark(cfg: EvalConfig, bench: str, records, indices: list[int], todo: set[int], engine,
                   done: set, results_path: Path, progress: bool) -> list[str]:
    """Generate the missing samples of the ``todo`` questions among the run's ``indices``, batch by
    batch (`batches`: of each, the questions it lacks), appending rows after every batch; returns
    the keys of questions skipped as too long."""
    sampling = SamplingConfig(temperature=cfg.temperature, max_new_tokens=cfg.max_new_tokens,
                              top_k=cfg.sample_top_k)
    skipped: list[str] = []
    bar = None
    if progress:
        from tqdm.auto import tqdm
        bar = tqdm(total=len(indices), initial=len(indices) - len(todo), desc=bench, unit="question")
    steps_path = results_path.with_name(STEPS)
    with results_path.open("a", encoding="utf-8") as f, (
            steps_path.open("a", encoding="utf-8") if cfg.analysis_steps
            else contextlib.nullcontext()) as steps_file:
        for whole in batches(indices, cfg):
            batch = [i for i in whole if i in todo]
            if not batch:
                continue
            prompts = [build_messages(records[i], cfg.protocol) for i in batch]
            idx, outs = _generate(engine, prompts, batch, records, skipped,
                                  soft_thinking=cfg.soft_thinking, sampling=sampling,
                                  n=cfg.samples, seed=cfg.seed)
            rows, steps = [], []
            for o in outs:
                i = idx[o.prompt_index]
                rec = records[i]
                if (bench, rec.key, o.sample_index) in done:
                    continue
                pred = extract_answer(bench, o.text, cfg.protocol, options=rec.options)
                row = {"benchmark": bench, "question_key": rec.key, "question_id": rec.id,
                       "question_index": i, "sample": o.sample_index, "category": rec.category,
                       "subcategory": rec.subcategory, "answer": rec.answer, "pred": pred,
                       "correct": pred == rec.answer, "finish_reason": o.finish_reason,
                       "think_closed": o.think_closed, "num_tokens": len(o.token_ids),
                       "soft_steps": int(o.trace.soft.sum()), "text": o.text,
                       **_tau_stats(o.trace)}
                rows.append(row)
                steps.append(steps_row(bench, i, o.sample_index, o.trace))
                done.add((bench, rec.key, o.sample_index))
            # the steps first: a sample recorded as done always has its steps
            for g, lines in ((steps_file, steps), (f, rows)):
                if g is not None:
                    g.write("".join(json.dumps(x, ensure_ascii=False) + "\n" for x in lines))
                    g.flush()
                    os.fsync(g.fileno())
            if bar is not None:
                bar.update(len(batch))
    if bar is not None:
        bar.close()
    return skipped


def selected_rows(rows: Sequence[dict], bench: str, records: Sequence[QuestionRecord],
                  samples: int) -> list[dict]:
    """The rows of ``bench`` this run asked for: its questions, samples ``0..samples-1``, one row
    per (question, sample) (the first, should a file hold two)."""
    wanted = {rec.key for rec in records}
    seen = set()
    out = []
    for r in rows:
        k = (r.get("question_key"), r["sample"])
        if r["benchmark"] == bench and k[0] in wanted and r["sample"] < samples and k not in seen:
            seen.add(k)
            out.append(r)
    return out


def requested_counts(records: Sequence[QuestionRecord], bench: str,
                     skipped: Sequence[str]) -> dict:
    """Questions this run asked for, per category and subcategory and in the overall (``questions``;
    ``skipped_overlong``: how many of those were skipped as too long): what each table cell would
    average over had every question been answered. ``skipped_categories`` and
    ``skipped_subcategories``: how many of each were skipped as too long (only those with one)."""
    excluded = EXCLUDED_FROM_OVERALL.get(bench, set())
    counted = [r for r in records if r.category not in excluded]
    skipped = set(skipped)
    gone = [r for r in records if r.key in skipped]
    return {"questions": len(counted),
            "skipped_overlong": sum(r.key in skipped for r in counted),
            "categories": dict(Counter(r.category for r in records)),
            "subcategories": dict(Counter(r.subcategory for r in records if r.subcategory)),
            "skipped_categories": dict(Counter(r.category for r in gone)),
            "skipped_subcategories": dict(Counter(r.subcategory for r in gone if r.subcategory))}


def write_reports(cfg: EvalConfig, rows: Sequence[dict],
                  selected: dict[str, list[QuestionRecord]],
                  skipped: dict[str, list[str]] | None = None,
                  left_out: dict[str, list[str]] | None = None) -> dict[str, dict]:
    """summary.json and <benchmark>.md from the rows this run asked for (atomic writes);
    ``left_out``: per benchmark, the records its loader left out (their messages)."""
    out = Path(cfg.output_dir)
    grouped = group_rows(rows)
    skipped = skipped or {}
    summaries = {}
    label = f"{cfg.model_name} {cfg.soft_thinking.mode}"
    for b in cfg.benchmarks:
        s = summarize(selected_rows(grouped.get(b, []), b, selected[b], cfg.samples), b)
        s["questions_requested"] = len(selected[b])
        s["skipped_overlong"] = sorted(skipped.get(b, []))
        s["requested"] = requested_counts(selected[b], b, s["skipped_overlong"])
        s["left_out"] = list((left_out or {}).get(b, []))
        summaries[b] = s
        _write_if_changed(out / f"{b}.md", f"## {b}\n\n" + markdown_table(
            s, label, cfg.published.get(b, []), cfg.samples))
    meta = {"mode": cfg.soft_thinking.mode, "protocol": cfg.protocol, "samples": cfg.samples,
            "limit": cfg.limit, "temperature": cfg.temperature, "top_k": cfg.soft_thinking.top_k,
            "max_new_tokens": cfg.max_new_tokens, "model": cfg.model_path,
            "controller": cfg.controller, "decode_top_k": cfg.sample_top_k,
            "task_types": cfg.task_types}
    _write_if_changed(out / "summary.json", json.dumps({"config": meta, "benchmarks": summaries},
                                                       indent=2))
    return summaries
