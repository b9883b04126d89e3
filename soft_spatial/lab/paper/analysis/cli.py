"""``python -m soft_spatial.analysis {fig4,fig5,fig6,fig7,all} ...``: the paper's Figures 4–7
from files, printed numbers beside the paper's.

  fig5 METRICS.jsonl          τ mean and min–max per training step (PNG)
  fig6 EVAL_DIR               τ vs normalised entropy: 2-D histogram, per-bin median and
                              10th/90th percentiles, correlation (PNG)
  fig7 EVAL_DIR               within-trace τ spread vs spread of trace medians, by correctness
                              and trace length (PNG)
  fig4 EVAL_DIR               one chain of thought shaded by τ, τ per step beneath (HTML)
  all --metrics M --eval E    all of them

Figures and ``analysis.json`` (every printed number) go to ``--out`` (default: ``analysis/``
beside the input). EVAL_DIR is an output directory of ``python -m soft_spatial.eval`` (with
``analysis_steps=true``, the default).
"""
from __future__ import annotations

import argparse
import json
import os
from collections.abc import Sequence
from pathlib import Path

from soft_spatial.lab.paper.analysis import spread as S
from soft_spatial.lab.paper.analysis import tau_entropy as TE
from soft_spatial.lab.paper.analysis.data import eval_model_path, load_metrics, load_traces
from soft_spatial.lab.paper.analysis.trace_html import pick_trace, token_pieces, trace_page
from soft_spatial.lab.paper.analysis.training import plot_tau_over_training, tau_over_training
from soft_spatial.models.loading import load_processing


def _fmt(v, nd=3) -> str:
    return "–" if v is None else f"{v:.{nd}f}"


def _record(out: Path, key: str, value: dict) -> None:
    """Merge ``value`` under ``key`` into ``out/analysis.json`` (atomic)."""
    path = out / "analysis.json"
    data = json.loads(path.read_text()) if path.is_file() else {}
    data[key] = value
    out.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2))
    os.replace(tmp, path)


def fig5(metrics: Path, out: Path) -> dict:

    m = load_metrics(metrics)
    res = tau_over_training(m)
    res["figure"] = str(plot_tau_over_training(m, out / "fig5_tau_training.png"))
    print(f"Fig. 5  tau mean {res['tau_mean_first']:.3f} (step {res['first_step']}) -> "
          f"{res['tau_mean_last']:.3f} (step {res['last_step']}), {res['steps']} steps; "
          f"per-step min-max over training {res['tau_min']:.3f}-{res['tau_max']:.3f}\n"
          f"        {res['figure']}")
    _record(out, "fig5", res)
    return res


def _soft_steps(traces):
    import numpy as np

    ent = np.concatenate([t.soft_entropy for t in traces])
    tau = np.concatenate([t.soft_tau for t in traces])
    if tau.size == 0:
        raise ValueError("the evaluation has no soft steps (a hard-mode evaluation?)")
    return ent, tau


def fig6(eval_dir: Path, out: Path, benchmark=None, bins=10, min_count=20) -> dict:
    traces = load_traces(eval_dir, benchmark)
    ent, tau = _soft_steps(traces)
    res = TE.tau_vs_entropy(ent, tau, bins=bins, min_count=min_count)
    res["figure"] = str(TE.plot_tau_vs_entropy(ent, tau, res, out / "fig6_tau_entropy.png"))
    p = TE.PAPER
    print(f"Fig. 6  median tau {_fmt(res['median_low'])} (lowest-entropy bin) -> "
          f"{_fmt(res['median_high'])} (highest)   paper {p['median_low']:.3f} -> "
          f"{p['median_high']:.3f}\n        r(tau, H) = {_fmt(res['r'])}   paper {p['r']:.3f}   "
          f"({res['steps']} soft steps of {len(traces)} traces)")
    print("        H bin      steps  median   p10    p90")
    for b in range(bins):
        print(f"        {res['edges'][b]:.2f}-{res['edges'][b + 1]:.2f}  {res['count'][b]:7d}  "
              f"{_fmt(res['median'][b])}  {_fmt(res['p10'][b])}  {_fmt(res['p90'][b])}")
    print(f"        {res['figure']}")
    res["paper"] = p
    _record(out, "fig6", res)
    return res


def fig7(eval_dir: Path, out: Path, benchmark=None, min_steps=5) -> dict:
    traces = load_traces(eval_dir, benchmark)
    rows = S.trace_spreads(traces, min_steps=min_steps)
    summary = S.spread_summary(rows)
    fig = str(S.plot_spread(rows, summary, out / "fig7_tau_spread.png"))
    a, p = summary["all"], S.PAPER
    print(f"Fig. 7  within-trace tau spread {_fmt(a['within'])} (mean P90-P10) vs across trace "
          f"medians {_fmt(a['across'])}   paper {p['within']:.3f} vs {p['across']:.3f}   "
          f"({a['traces']} traces with >= {min_steps} soft steps)")
    q1, q2 = summary["length_bounds"]
    for g in ("correct", "incorrect", "short", "medium", "long"):
        s = summary[g]
        note = {"short": f" (<= {q1:.0f} steps)", "medium": f" ({q1:.0f}-{q2:.0f})",
                "long": f" (> {q2:.0f})"}.get(g, "")
        print(f"        {g + note:22} {s['traces']:5d} traces  within {_fmt(s['within'])}  "
              f"across {_fmt(s['across'])}")
    print(f"        {fig}")
    res = {"summary": summary, "figure": fig, "paper": p, "min_steps": min_steps}
    _record(out, "fig7", res)
    return res


def fig4(eval_dir: Path, out: Path, benchmark=None, sample=None, tokenizer=None) -> dict:


    traces = load_traces(eval_dir, benchmark)
    t = pick_trace(traces, sample)
    tok_dir = tokenizer or eval_model_path(eval_dir)
    if not tok_dir:
        raise ValueError(f"{eval_dir}: summary.json names no model; pass --tokenizer DIR")
    tok = load_processing(tok_dir)[2]
    path = out / "fig4_trace.html"
    out.mkdir(parents=True, exist_ok=True)
    path.write_text(trace_page(t, token_pieces(tok, t.token)), encoding="utf-8")
    key = f"{t.benchmark}:{t.question_index}:{t.sample}"
    print(f"Fig. 4  sample {key} ({int(t.soft.sum())} soft steps, "
          f"{'correct' if t.correct else 'incorrect'}): {path}")
    res = {"sample": key, "figure": str(path)}
    _record(out, "fig4", res)
    return res


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m soft_spatial.analysis", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)

    def eval_args(sp, out_help="default: EVAL_DIR/analysis"):
        sp.add_argument("--benchmark", default=None, help="only this benchmark's samples")
        sp.add_argument("--out", type=Path, default=None, help=out_help)

    f5 = sub.add_parser("fig5", help="tau over training (metrics.jsonl)")
    f5.add_argument("metrics", type=Path)
    f5.add_argument("--out", type=Path, default=None, help="default: analysis/ beside METRICS")
    f6 = sub.add_parser("fig6", help="tau vs normalised entropy")
    f6.add_argument("eval_dir", type=Path)
    f6.add_argument("--bins", type=int, default=10, help="entropy bins on [0, 1] (10)")
    f6.add_argument("--min-count", type=int, default=20, help="steps for a bin's statistics (20)")
    eval_args(f6)
    f7 = sub.add_parser("fig7", help="within- vs across-trace tau spread")
    f7.add_argument("eval_dir", type=Path)
    f7.add_argument("--min-steps", type=int, default=5, help="soft steps for a trace to count (5)")
    eval_args(f7)
    f4 = sub.add_parser("fig4", help="one chain of thought shaded by tau (HTML)")
    f4.add_argument("eval_dir", type=Path)
    f4.add_argument("--sample", default=None, help="benchmark:question_index:sample "
                                                    "(default: a correct trace of median length)")
    f4.add_argument("--tokenizer", default=None, help="model dir (default: from summary.json)")
    eval_args(f4)
    al = sub.add_parser("all", help="every figure")
    al.add_argument("--metrics", type=Path, default=None, help="training metrics.jsonl (Fig. 5)")
    al.add_argument("--eval", type=Path, default=None, dest="eval_dir",
                    help="evaluation directory (Figs. 4, 6, 7)")
    al.add_argument("--bins", type=int, default=10)
    al.add_argument("--min-count", type=int, default=20)
    al.add_argument("--min-steps", type=int, default=5)
    al.add_argument("--sample", default=None)
    al.add_argument("--tokenizer", default=None)
    eval_args(al, "default: EVAL_DIR/analysis (or beside METRICS)")
    return p


def main(argv: Sequence[str] | None = None) -> dict:
    args = _parser().parse_args(argv)
    c = args.command
    if c == "fig5":
        return fig5(args.metrics, args.out or args.metrics.parent / "analysis")
    if c == "all" and args.metrics is None and args.eval_dir is None:
        raise SystemExit("all: give --metrics and/or --eval")
    base = args.eval_dir if args.eval_dir is not None else args.metrics.parent
    out = args.out or base / "analysis"
    if c == "fig6":
        return fig6(args.eval_dir, out, args.benchmark, args.bins, args.min_count)
    if c == "fig7":
        return fig7(args.eval_dir, out, args.benchmark, args.min_steps)
    if c == "fig4":
        return fig4(args.eval_dir, out, args.benchmark, args.sample, args.tokenizer)
    res = {}
    if args.metrics is not None:
        res["fig5"] = fig5(args.metrics, out)
    if args.eval_dir is not None:
        res["fig6"] = fig6(args.eval_dir, out, args.benchmark, args.bins, args.min_count)
        res["fig7"] = fig7(args.eval_dir, out, args.benchmark, args.min_steps)
        res["fig4"] = fig4(args.eval_dir, out, args.benchmark, args.sample, args.tokenizer)
    print(f"numbers: {out / 'analysis.json'}")
    return res

