"""The reading diagnostic (docs/results/softness.md, "The reading diagnostic"): handed the true
superposition at its branch steps while every other step is its own *hard* decoding, does the
two-view warm start read it?

Stage 0 (:mod:`.stage0`) fed the oracle mixture at the branch steps but decoded every other
thinking step softly from the model's own mixtures, which it never trained on; that alone cost
9.7 points at m = 1. This decode removes that confound: ``python -m
soft_spatial.lab.softness.reading SEED_DIR`` on a ``budget=paths`` seed directory (its data and
its two-view warm start) writes ``SEED_DIR/reading/reading.{md,json}``:

1. the gate evaluation ``gate_mix_hard`` (``python -m soft_spatial.eval mode=hard``, with the name,
   directory and command Phase 0's gate stage uses, :mod:`.phase0`; skipped when it is complete);
2. three decodes of every test question through :func:`~.oracle_decode.decode` in ``hard`` mode
   (every thinking step one-hot, sampled exactly as (1) samples it; mean@8, T = 1.0, sample j of
   question i seeded as ``python -m soft_spatial.eval seed=0`` seeds it): ``hard`` (nothing
   replaced), ``guess`` (the input after every branch step the one-hot live cell of one start drawn
   per sample) and ``oracle`` (the true live mixture Stage 0 fed, at its τ 0.9 and the step's own
   noise), ``samples_<decode>.jsonl``, resumable by question; ``hard`` is checked against (1)
   sample by sample;
3. the rule registered in issue 54 before any number (:data:`RULE`, :func:`decide`);
4. exploratory, deciding nothing: (a) the teacher-forced soft view on the test items (W-mix's own
   training objective, held out: P(``circle``) after the branch, the first cell after it, the
   letter); (b) binding: the distance between ½(E[c1r1] + E[c2r2]) and ½(E[c1r2] + E[c2r1]) against
   the distance between two random pairs' mixtures, and the weight the model puts on the cross
   cells against its fair null, the other cells of a live cell's column or row (per cell), at the
   branch steps s ≥ 2 of the teacher-forced soft view and of the three decodes.

Each step is skipped when its output exists; the decodes resume at their first missing question.
"""
from __future__ import annotations

import argparse
import json
import os
import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
import torch

from soft_spatial.data import load_omnispatial
from soft_spatial.data.synthetic import read_rows
from soft_spatial.eval.runner import read_results
from soft_spatial.lab.learning.path_views import (PathTruth, soft_view_targets, trace_words,
                                                  word_positions)
from soft_spatial.lab.learning.warmstart import (WarmStartConfig, add_mixture_noise, collate, encode,
                                                 response_logits)
from soft_spatial.lab.softness.branches import path_rows
from soft_spatial.lab.softness.oracle_decode import OracleSpec, cross_cells, line_cells
from soft_spatial.lab.softness.stage0 import (DECODE_SAMPLE_TOP_K, Stage0Config, bootstrap_diff,
                                              decode_to_file, never_closed, per_question,
                                              same_texts)
from soft_spatial.softthink import SamplingConfig, SoftThinkingConfig

__all__ = ["RULE", "DECODES", "ReadingConfig", "decide", "contrasts", "binding_distances",
           "per_cell", "readout_summary", "teacher_forced", "measure", "report", "run", "main"]

#: the rule, as issue 54 registered it before any number
RULE = ("Reading is intact if on m = 2: oracle-in-hard − hard ≥ +10 points with the paired "
        "bootstrap 95% CI's lower end > 0, and oracle-in-hard − guess-in-hard ≥ +5. Otherwise it "
        "is not. Report m = 1 and m = 3 beside it, deciding nothing.")
#: decode -> oracle kind (every m, hard decoding)
DECODES = {"hard": "none", "guess": "guess", "oracle": "mixture"}
MS = (1, 2, 3)


@dataclass(frozen=True)
class ReadingConfig:
    """What the diagnostic registered; ``limit`` (questions per m), ``pairs`` and ``draws`` only
    shrink it for tests."""

    seed_dir: str
    samples: int = 8
    temperature: float = 1.0
    max_new_tokens: int = 48
    eval_seed: int = 0
    warm_seed: int = 0
    """The warm start's seed: the oracle mixtures' distractors and the soft view's noise."""
    distractor_mass: float = WarmStartConfig.distractor_mass
    tau: float = 0.9
    """The oracle mixture's τ (Stage 0's)."""
    min_gain: float = 10.0
    """The rule: oracle − hard on m = 2 at least this (points), its CI's lower end above 0..."""
    min_over_guess: float = 5.0
    """... and oracle − guess on m = 2 at least this."""
    limit: int | None = None
    pairs: int = 20000
    """(b): random pairs of cell pairs the cross distance is compared with."""
    draws: int = 10000
    """Bootstrap resamples."""

    @property
    def out(self) -> Path:
        return Path(self.seed_dir) / "reading"


# -- the rule ------------------------------------------------------------------------------------
def decide(oracle_hard: Mapping, oracle_guess: Mapping, min_gain: float = 10.0,
           min_over_guess: float = 5.0) -> dict:
    """:data:`RULE` on the m = 2 contrasts (``bootstrap_diff``'s ``diff``, ``lo``; points)."""
    conditions = {f"oracle - hard >= +{min_gain:g}": oracle_hard["diff"] >= min_gain,
                  "its 95% CI's lower end > 0": oracle_hard["lo"] > 0,
                  f"oracle - guess >= +{min_over_guess:g}": oracle_guess["diff"] >= min_over_guess}
    intact = all(conditions.values())
    failed = [c for c, ok in conditions.items() if not ok]
    return {"intact": intact, "conditions": conditions,
            "verdict": ("reading is intact" if intact else
                        "reading is not intact (fails: " + "; ".join(failed) + ")")}


def contrasts(by_q: Mapping[str, Mapping[int, Mapping[str, float]]], draws: int = 10000) -> dict:
    """``{"<a> - <b>": {m: bootstrap_diff}}`` for oracle − hard, guess − hard, oracle − guess."""
    out = {}
    for a, b in (("oracle", "hard"), ("guess", "hard"), ("oracle", "guess")):
        out[f"{a} - {b}"] = {m: bootstrap_diff(by_q[a][m], by_q[b][m], draws)
                            for m in MS if by_q[a].get(m) and by_q[b].get(m)}
    return out


# -- (b) binding -----------------------------------------------------------------------------------
def binding_distances(embeddings: np.ndarray, pairs: int = 20000, seed: int = 0,
                      grid: int = 6) -> dict:
    """Over the ``[grid², D]`` cell embeddings (rows ``a1, b1, .., f6``): the distance between
    ½(E[c1r1] + E[c2r2]) and ½(E[c1r2] + E[c2r1]) for every rectangle (c1 ≠ c2, r1 ≠ r2: the
    live pair and its cross pair), against the distance between the mixtures of two random
    disjoint pairs of cells (``pairs`` draws, less those that are a pair and its cross pair):
    medians, their ratio, and the share of random distances below the median cross distance (0 for
    a code that cannot bind at all)."""
    e = embeddings.astype(np.float64)

    def at(x, y):
        return e[y * grid + x]

    cross = [float(np.linalg.norm((at(c1, r1) + at(c2, r2) - at(c1, r2) - at(c2, r1)) / 2))
             for c1 in range(grid) for c2 in range(c1 + 1, grid)
             for r1 in range(grid) for r2 in range(r1 + 1, grid)]
    rng = np.random.default_rng(seed)
    idx = np.array([rng.choice(grid * grid, 4, replace=False) for _ in range(pairs)])
    col, row = idx % grid, idx // grid
    swapped = (((col[:, 2] == col[:, 0]) & (row[:, 2] == row[:, 1]) & (col[:, 3] == col[:, 1])
                & (row[:, 3] == row[:, 0])) | ((col[:, 3] == col[:, 0]) & (row[:, 3] == row[:, 1])
                                              & (col[:, 2] == col[:, 1]) & (row[:, 2] == row[:, 0])))
    idx = idx[~swapped]  # a pair and its own cross pair: the measured distances, not the null's
    rand = np.linalg.norm((e[idx[:, 0]] + e[idx[:, 1]] - e[idx[:, 2]] - e[idx[:, 3]]) / 2, axis=1)
    med = float(np.median(cross))
    return {"cross_median": med, "random_median": float(np.median(rand)),
            "ratio": med / float(np.median(rand)),
            "random_below_cross_median": float(np.mean(rand < med)), "rectangles": len(cross)}


def per_cell(live_mass: float, cross_mass: float, n_cross: int, line_mass: float,
             n_line: int) -> dict:
    """Sums over branch steps to means per cell: the cross cells' and the fair null's."""
    cross = cross_mass / n_cross if n_cross else float("nan")
    line = line_mass / n_line if n_line else float("nan")
    return {"cross_per_cell": cross, "line_per_cell": line,
            "cross_over_line": cross / line if n_cross and n_line and line > 0 else float("nan")}


def readout_summary(samples: Sequence[Mapping], m: int, min_step: int = 2) -> dict:
    """At the branch steps s ≥ ``min_step`` of the m-start samples (each read the inputs of the
    branch steps before it): the model's mean live mass and true weight, and its weight per cross
    cell against per cell of a live cell's column or row."""
    sums = defaultdict(float)
    n = 0
    for r in samples:
        if r["m"] != m:
            continue
        for x in r["readouts"]:
            if x["step"] < min_step:
                continue
            n += 1
            for key in ("live_mass", "true_weight", "cross_mass", "n_cross", "line_mass", "n_line"):
                sums[key] += x.get(key, 0.0)
    if not n:
        return {"steps": 0}
    return {"steps": n, "live_mass": sums["live_mass"] / n, "true_weight": sums["true_weight"] / n,
            **per_cell(sums["live_mass"], sums["cross_mass"], int(sums["n_cross"]),
                       sums["line_mass"], int(sums["n_line"]))}


# -- (a) the teacher-forced soft view --------------------------------------------------------------
@torch.no_grad()
def teacher_forced(model, processor, records, rows: Mapping[str, Mapping], seed: int = 0,
                   distractor_mass: float = WarmStartConfig.distractor_mass) -> dict:
    """The soft view of every path question in ``records`` (as the warm start trains it: the
    true trace, the live mixture plus distractors at the position words of steps s ≤ t*, Gumbel
    noise at c = 1 and a τ per sequence from [0.1, 0.9], drawn from ``seed``), teacher-forced: per
    m, the mean P(``circle``) at its position, the % of items whose first cell after ``circle``
    and whose letter the model's argmax names, and at the position words of steps 2..t* the
    model's live mass and its weight per cross cell against per cell of a live cell's column or
    row."""
    tok = processor.tokenizer

    def one(word: str) -> int:
        return tok.encode(" " + word, add_special_tokens=False)[0]

    circle = one("circle")
    gen = torch.Generator().manual_seed(seed)
    acc: dict[int, dict[str, list]] = defaultdict(lambda: defaultdict(list))
    sums: dict[int, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for rec in records:
        row = rows[rec.id]
        truth = PathTruth.from_row(dict(row))
        words = trace_words(truth, truth.true_branch)
        ex = encode(processor, rec, " ".join(words))
        ids = ex.inputs["input_ids"][0].tolist()
        positions = word_positions(tok, ids, ex.response_start, words, "reading")
        targets, mixtures = soft_view_targets(tok, truth, positions, seed, rec.id, distractor_mass)
        batch = add_mixture_noise(collate([replace(ex, soft_labels=tuple(targets),
                                                   mixtures=tuple(mixtures))], tok.pad_token_id,
                                          image_processor=processor.image_processor), gen)
        logp = torch.log_softmax(response_logits(model, batch)[0].double(), -1)
        m, at = truth.m, acc[truth.m]
        pc = positions[2 * truth.t_star]  # the word after step t*'s position word: circle
        at["p_circle"].append(float(logp[pc - 1, circle].exp()))
        after = positions[2 * truth.t_star + 2]  # circle, move t* + 1, its cell
        at["first_cell_after"].append(int(logp[after - 1].argmax()) == ids[after])
        at["letter"].append(int(logp[ex.answer_at - 1].argmax()) == ids[ex.answer_at])
        for s in range(2, truth.t_star + 1):
            live = [b[s - 1] for b in truth.branches]
            p = logp[positions[2 * s - 1] - 1].exp()

            def mass(cells):
                return float(sum(p[one(c)] for c in cells))

            cross, line = cross_cells(live), line_cells(live, truth.grid)
            sums[m]["steps"] += 1
            sums[m]["live_mass"] += mass(live)
            sums[m]["cross_mass"] += mass(cross)
            sums[m]["n_cross"] += len(cross)
            sums[m]["line_mass"] += mass(line)
            sums[m]["n_line"] += len(line)
    out = {}
    for m in sorted(acc):
        a, s = acc[m], sums[m]
        out[m] = {"items": len(a["letter"]), "p_circle": float(np.mean(a["p_circle"])),
                  "first_cell_after": 100.0 * float(np.mean(a["first_cell_after"])),
                  "letter": 100.0 * float(np.mean(a["letter"]))}
        if s["steps"]:
            out[m]["branch_steps"] = {"steps": int(s["steps"]), "live_mass": s["live_mass"] / s["steps"],
                                      **per_cell(s["live_mass"], s["cross_mass"], int(s["n_cross"]),
                                                 s["line_mass"], int(s["n_line"]))}
    return out


# -- the runs --------------------------------------------------------------------------------------
def hard_evaluation(cfg: ReadingConfig) -> Path:
    """``gate_mix_hard``: the two-view warm start through ``python -m soft_spatial.eval
    mode=hard`` as Phase 0's gate stage runs it (skipped when complete under its key)."""
    from soft_spatial.lab.softness.gates import GATE_EVALS
    from soft_spatial.lab.softness.stage0 import _experiment

    exp = _experiment(Stage0Config(cfg.seed_dir, samples=cfg.samples, max_new_tokens=cfg.max_new_tokens,
                                   eval_seed=cfg.eval_seed), cfg.temperature)
    view, mode, _ = GATE_EVALS["mix_hard"]
    return exp.evaluate("gate_mix_hard", exp.warm_dir(view), mode)


def measure(cfg: ReadingConfig, eval_dir: Path, engine, records, rows, say=print) -> dict:
    """Every number of the diagnostic (module docstring) from the hard evaluation ``eval_dir``
    and the decodes (run here when missing) on ``engine``."""
    paths = path_rows(rows)
    times = {}
    soft = SoftThinkingConfig(mode="hard")  # K, c and the noise clamp: the evaluation's defaults
    sampling = SamplingConfig(temperature=cfg.temperature, max_new_tokens=cfg.max_new_tokens,
                              top_k=DECODE_SAMPLE_TOP_K)
    decoded = {}
    for name, kind in DECODES.items():
        say(f"2 decode {name} (oracle {kind}, hard decoding)")
        t0 = time.time()
        spec = OracleSpec(kind, cfg.warm_seed, cfg.distractor_mass, hard_tau=cfg.tau)
        decoded[name] = read_results(decode_to_file(
            cfg.out / f"samples_{name}.jsonl", name, engine, records, rows, MS, soft, sampling, spec,
            cfg.samples, cfg.eval_seed, cfg.limit, say))
        times[f"decode_{name}_s"] = time.time() - t0
    by_q = {n: {m: per_question(v, paths, m) for m in MS} for n, v in decoded.items()}
    accuracy = {n: {m: 100.0 * float(np.mean(list(q.values()))) for m, q in per_m.items() if q}
                for n, per_m in by_q.items()}
    c = contrasts(by_q, cfg.draws)
    rule = (decide(c["oracle - hard"][2], c["oracle - guess"][2], cfg.min_gain, cfg.min_over_guess)
            if 2 in c["oracle - hard"] and 2 in c["oracle - guess"] else None)
    evaluation = read_results(Path(eval_dir) / "samples.jsonl")
    say("3 exploratory: the teacher-forced soft view, binding")
    t0 = time.time()
    kept = {r["question_id"] for r in decoded["hard"]}
    tf = teacher_forced(engine.model, engine.processor, [r for r in records if r.id in kept], rows,
                        cfg.warm_seed, cfg.distractor_mass)
    times["teacher_forced_s"] = time.time() - t0
    cell_ids = [engine.tokenizer.encode(f" {'abcdefgh'[x]}{y + 1}", add_special_tokens=False)[0]
                for y in range(6) for x in range(6)]
    binding = {"embeddings": {which: binding_distances(w.weight[cell_ids].detach().double().numpy(),
                                                       cfg.pairs)
                              for which, w in (("input", engine.embed), ("output", engine.lm_head))},
               "decodes": {n: {m: readout_summary(v, m) for m in (2, 3)} for n, v in decoded.items()},
               "teacher_forced": {m: tf[m].get("branch_steps", {}) for m in tf if m > 1}}
    return {"config": asdict(cfg), "rule": RULE, "decision": rule, "accuracy": accuracy,
            "contrasts": c, "hard_vs_evaluation": same_texts(decoded["hard"], evaluation),
            "never_closed": {n: never_closed(v) for n, v in decoded.items()},
            "exploratory": {"teacher_forced_soft_view": {m: {k: v for k, v in r.items()
                                                             if k != "branch_steps"}
                                                         for m, r in tf.items()},
                            "binding": binding},
            "times": times}


def _ci(c: Mapping) -> str:
    return f"{c['diff']:+.1f} [{c['lo']:+.1f}, {c['hi']:+.1f}]"


def report(result: Mapping) -> str:
    """``reading.md``: the rule and its verdict first, then every table."""
    acc, c, dec = result["accuracy"], result["contrasts"], result["decision"]
    lines = ["# The reading diagnostic", "", f"Rule (issue 54, registered before any number): {RULE}",
             "", f"**Verdict: {dec['verdict'] if dec else 'no m = 2 questions decoded'}.**", "",
             "| accuracy (mean@8, %) | m = 1 | m = 2 | m = 3 |", "|---|---|---|---|"]
    for name in DECODES:
        lines.append(f"| {name} | " + " | ".join(f"{acc[name][m]:.1f}" if m in acc[name] else "-"
                                                for m in MS) + " |")
    lines += ["", "| contrast (points, paired bootstrap 95% CI) | m = 1 | m = 2 | m = 3 |",
              "|---|---|---|---|"]
    for name, per in c.items():
        lines.append(f"| {name} | " + " | ".join(_ci(per[m]) if m in per else "-" for m in MS) + " |")
    same = result["hard_vs_evaluation"]
    lines += ["", f"The hard decode against the evaluation `gate_mix_hard`: {same['identical']:.1f}% of "
              f"{same['n']} samples identical. Think block never closed (% of samples): "
              + ", ".join(f"{n} {v:.1f}" for n, v in result["never_closed"].items()) + ".", "",
              "Exploratory, deciding nothing.", "",
              "| (a) teacher-forced soft view | items | P(circle) | first cell after it (%) | letter (%) |",
              "|---|---|---|---|---|"]
    for m, r in result["exploratory"]["teacher_forced_soft_view"].items():
        lines.append(f"| m = {m} | {r['items']} | {r['p_circle']:.3f} | {r['first_cell_after']:.1f} | "
                     f"{r['letter']:.1f} |")
    b = result["exploratory"]["binding"]
    lines += ["", "| (b) cell embeddings | cross distance (median) | random pairs (median) | ratio | "
              "random below the cross median |", "|---|---|---|---|---|"]
    for which, d in b["embeddings"].items():
        lines.append(f"| {which} | {d['cross_median']:.3f} | {d['random_median']:.3f} | {d['ratio']:.2f} | "
                     f"{d['random_below_cross_median']:.3f} |")
    lines += ["", "| (b) weight at branch steps s ≥ 2 | m | steps | live mass | per cross cell | "
              "per cell of a live row/column | ratio |", "|---|---|---|---|---|---|---|"]
    rows = [("teacher-forced soft view", m, r) for m, r in b["teacher_forced"].items()]
    rows += [(f"decode {n}", m, r) for n, per in b["decodes"].items() for m, r in per.items()]
    for name, m, r in rows:
        if r.get("steps"):
            lines.append(f"| {name} | {m} | {r['steps']} | {r['live_mass']:.3f} | {r['cross_per_cell']:.4f} | "
                         f"{r['line_per_cell']:.4f} | {r['cross_over_line']:.2f} |")
    t = result["times"]
    lines += ["", "Times (s): " + ", ".join(f"{k[:-2]} {v:.0f}" for k, v in t.items()) + "."]
    return "\n".join(lines) + "\n"


def run(cfg: ReadingConfig, eval_dir: Path | None = None, say=print) -> dict:
    """The diagnostic end to end (module docstring); ``eval_dir`` given: that hard evaluation
    instead of running it."""
    seed_dir = Path(cfg.seed_dir)
    data, warm = seed_dir / "data", seed_dir / "models" / "warmstart"
    for need in (data / "OmniSpatial-test" / "data.json", warm / "model.safetensors"):
        if not need.is_file():
            raise FileNotFoundError(f"reading: {need} does not exist (run python -m "
                                    f"soft_spatial.lab.softness run budget=paths out={seed_dir} first)")
    cfg.out.mkdir(parents=True, exist_ok=True)
    from soft_spatial.engines.local import LocalEngine

    t0 = time.time()
    if eval_dir is None:
        say("1 the hard evaluation of the two-view warm start (gate_mix_hard)")
        eval_dir = hard_evaluation(cfg)
    t_eval = time.time() - t0
    rows = read_rows(data / "OmniSpatial-test")
    records = load_omnispatial(data, "test")
    engine = LocalEngine.from_pretrained(warm)
    result = measure(cfg, eval_dir, engine, records, rows, say)
    result["times"] = {"evaluation_s": t_eval, **result["times"]}
    warm_meta = warm / "warmstart.json"
    if warm_meta.is_file():
        result["warm_start_final_loss"] = json.loads(warm_meta.read_text()).get("final_loss")
    (cfg.out / "reading.json").write_text(json.dumps(result, indent=1))
    (cfg.out / "reading.md").write_text(report(result))
    say(report(result))
    return result


def main(argv: Sequence[str] | None = None) -> dict:
    p = argparse.ArgumentParser(prog="python -m soft_spatial.lab.softness.reading",
                                description=__doc__.splitlines()[0])
    p.add_argument("seed_dir", help="a budget=paths seed directory (the run command's out=)")
    p.add_argument("--limit", type=int, default=None, help="questions per m (a smoke run)")
    p.add_argument("--threads", type=int, default=1,
                   help="torch threads here and in the evaluation (the tiny model decodes fastest "
                        "on one)")
    a = p.parse_args(argv)
    torch.set_num_threads(a.threads)
    os.environ["OMP_NUM_THREADS"] = str(a.threads)  # the evaluation's process inherits it
    return run(ReadingConfig(a.seed_dir, limit=a.limit))


if __name__ == "__main__":
    main()
