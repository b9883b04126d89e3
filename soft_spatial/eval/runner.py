"""Evaluation loop: benchmarks → prompts → engine → extracted letters → JSONL, JSON, tables.

Results are appended to ``samples.jsonl`` after every batch of questions (flushed and synced), so
an interrupted run resumes where it stopped: finished (question, sample) pairs are never redone.
``summary.json`` and one ``<benchmark>.md`` table per benchmark are rebuilt from the JSONL at the
end of every run. With ``analysis_steps`` every sample's per-step τ, normalised entropy, spine
token and soft flag go to ``steps.jsonl`` (:mod:`.steps`, read by ``python -m
soft_spatial.analysis``). ``task_types`` evaluates a task-type subset (question indices stay
those of the full benchmark); ``top_k`` filters every discrete step's sampling (hard mode: the
whole response, Table 5's decoding top-k 5; soft modes: the answer after ``</think>``).
"""
from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from soft_spatial.data import build_messages, extract_answer, load_benchmark
from soft_spatial.data.subsets import matches, normalise_task_types, subset_indices
from soft_spatial.softthink import SamplingConfig, SoftThinkingConfig

from .report import group_rows, markdown_table, summarize
from .steps import STEPS, steps_row

__all__ = ["EvalConfig", "evaluate", "read_results"]

RESULTS = "samples.jsonl"


@dataclass
class EvalConfig:
    """Typed evaluation settings (built from configs/eval.yaml)."""

    benchmarks: List[str]
    data: Dict[str, str]
    model_path: str
    soft: SoftThinkingConfig
    output_dir: str
    model_name: str = "model"
    controller: Optional[str] = None
    engine: str = "local"
    samples: int = 8
    temperature: float = 0.6
    max_new_tokens: int = 3072
    protocol: str = "ours"
    limit: Optional[int] = None
    split: Optional[str] = None
    seed: int = 0
    device: str = "cpu"
    dtype: str = "float32"
    batch_rows: int = 64
    sglang: Dict[str, Any] = field(default_factory=dict)  # ServerArgs keywords (engine=sglang)
    published: Dict[str, list] = field(default_factory=dict)
    top_k: int = 5  # discrete steps sample from the top-k (0 = full vocabulary)
    task_types: Optional[List[str]] = None  # a task-type subset (None = every question)
    analysis_steps: bool = True  # write steps.jsonl

    def __post_init__(self):
        self.task_types = normalise_task_types(self.task_types)
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0 (0 = off), got {self.top_k}")
        if self.protocol not in ("ours", "official"):
            raise ValueError(f"protocol must be 'ours' or 'official', got {self.protocol!r}")
        if self.engine not in ("local", "sglang"):
            raise ValueError(f"engine must be 'local' or 'sglang', got {self.engine!r}")
        if self.samples < 1:
            raise ValueError(f"samples must be >= 1, got {self.samples}")
        missing = [b for b in self.benchmarks if b not in self.data]
        if missing:
            raise ValueError(f"no data root configured for {missing} (set data.<name>=DIR)")
        if self.soft.mode == "adaptsoft" and not self.controller:
            raise ValueError("mode=adaptsoft needs controller=<AdaptSoft checkpoint>")


def read_results(path: Path) -> List[dict]:
    """Rows of a results JSONL; a torn last line (crash mid-write) is dropped."""
    rows = []
    if not path.exists():
        return rows
    lines = path.read_text(encoding="utf-8").splitlines()
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            if i == len(lines) - 1:
                break
            raise ValueError(f"{path}: line {i + 1} is not valid JSON")
    return rows


def _make_engine(cfg: EvalConfig):
    import torch
    if cfg.engine == "sglang":
        from soft_spatial.engines.sglang.engine import SGLangEngine
        return SGLangEngine(cfg.model_path, cfg.soft, controller=cfg.controller, seed=cfg.seed,
                            server_args=cfg.sglang)
    from soft_spatial.engines.local import LocalEngine
    return LocalEngine.from_pretrained(cfg.model_path, device=cfg.device,
                                       dtype=getattr(torch, cfg.dtype), controller=cfg.controller,
                                       max_batch_rows=cfg.batch_rows)


def _tau_stats(trace) -> dict:
    tau = trace.tau[trace.soft]
    if tau.numel() == 0:
        return {"tau_mean": None, "tau_std": None, "tau_min": None, "tau_max": None}
    return {"tau_mean": float(tau.mean()), "tau_std": float(tau.std()) if tau.numel() > 1 else 0.0,
            "tau_min": float(tau.min()), "tau_max": float(tau.max())}


def evaluate(cfg: EvalConfig, engine=None, progress: bool = True) -> Dict[str, dict]:
    """Run (or resume) the evaluation; returns the summary per benchmark. An engine made here
    (none is made when everything is done) is closed here, on errors too."""
    out = Path(cfg.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    results_path = out / RESULTS
    rows = read_results(results_path)
    if results_path.exists():  # drop a torn last line so appended rows start on a fresh line
        _atomic_write(results_path, "".join(json.dumps(r, ensure_ascii=False) + "\n"
                                            for r in rows))
    done = {(r["benchmark"], r["question_index"], r["sample"]) for r in rows}
    owned = None
    try:
        for bench in cfg.benchmarks:
            records = load_benchmark(bench, cfg.data[bench], cfg.split)
            selected = subset_indices(records, cfg.task_types, where=f"{bench} task_types")
            if cfg.limit is not None:
                selected = selected[: cfg.limit]
            todo = [i for i in selected
                    if any((bench, i, j) not in done for j in range(cfg.samples))]
            if not todo:
                continue
            if engine is None:
                engine = owned = _make_engine(cfg)
            _run_benchmark(cfg, bench, records, todo, engine, done, results_path, progress,
                           len(selected))
    finally:
        if owned is not None and hasattr(owned, "close"):
            owned.close()
    return write_reports(cfg, read_results(results_path))


def _run_benchmark(cfg: EvalConfig, bench: str, records, todo: List[int], engine, done: set,
                   results_path: Path, progress: bool, total: int) -> None:
    """Generate the missing samples of ``todo`` questions, appending rows after every batch."""
    sampling = SamplingConfig(temperature=cfg.temperature, max_new_tokens=cfg.max_new_tokens,
                              top_k=cfg.top_k)
    per_batch = max(1, cfg.batch_rows // cfg.samples)
    bar = None
    if progress:
        from tqdm.auto import tqdm
        bar = tqdm(total=total, initial=total - len(todo), desc=bench, unit="question")
    steps_path = results_path.with_name(STEPS)
    with results_path.open("a", encoding="utf-8") as f, (
            steps_path.open("a", encoding="utf-8") if cfg.analysis_steps
            else contextlib.nullcontext()) as steps_file:
        for s in range(0, len(todo), per_batch):
            idx = todo[s:s + per_batch]
            prompts = [build_messages(records[i], cfg.protocol) for i in idx]
            outs = engine.generate(prompts, soft=cfg.soft, sampling=sampling, n=cfg.samples,
                                   seeds=[cfg.seed + i for i in idx])
            rows, steps = [], []
            for o in outs:
                i = idx[o.prompt_index]
                if (bench, i, o.sample_index) in done:
                    continue
                rec = records[i]
                pred = extract_answer(bench, o.text, cfg.protocol, options=rec.options)
                row = {"benchmark": bench, "question_index": i, "question_id": rec.id,
                       "sample": o.sample_index, "category": rec.category,
                       "subcategory": rec.subcategory, "answer": rec.answer, "pred": pred,
                       "correct": pred == rec.answer, "finish_reason": o.finish_reason,
                       "think_closed": o.think_closed, "num_tokens": len(o.token_ids),
                       "soft_steps": int(o.trace.soft.sum()), "text": o.text,
                       **_tau_stats(o.trace)}
                rows.append(row)
                steps.append(steps_row(bench, i, o.sample_index, o.trace))
            # the steps first: a sample recorded as done always has its steps
            for g, lines in ((steps_file, steps), (f, rows)):
                if g is not None:
                    g.write("".join(json.dumps(x, ensure_ascii=False) + "\n" for x in lines))
                    g.flush()
                    os.fsync(g.fileno())
            if bar is not None:
                bar.update(len(idx))
    if bar is not None:
        bar.close()


def write_reports(cfg: EvalConfig, rows: Sequence[dict]) -> Dict[str, dict]:
    """summary.json and <benchmark>.md from the per-sample rows (atomic writes)."""
    out = Path(cfg.output_dir)
    rows = [r for r in rows if matches(r["category"], r.get("subcategory"), cfg.task_types)]
    grouped = group_rows(rows)
    summaries = {b: summarize(grouped.get(b, []), b) for b in cfg.benchmarks}
    label = f"{cfg.model_name} {cfg.soft.mode}"
    for b, s in summaries.items():
        _atomic_write(out / f"{b}.md", f"## {b}\n\n" + markdown_table(
            s, label, cfg.published.get(b, []), cfg.samples))
    meta = {"mode": cfg.soft.mode, "protocol": cfg.protocol, "samples": cfg.samples,
            "temperature": cfg.temperature, "top_k": cfg.soft.top_k,
            "max_new_tokens": cfg.max_new_tokens, "model": cfg.model_path,
            "controller": cfg.controller, "decode_top_k": cfg.top_k,
            "task_types": cfg.task_types}
    _atomic_write(out / "summary.json", json.dumps({"config": meta, "benchmarks": summaries},
                                                   indent=2))
    return summaries


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
