"""The softness experiment's Stage 0 (docs/learning.md, "Stage 0, registered before it runs"): can
the two-view warm start *read* a superposition when it is handed one?

``python -m soft_spatial.lab.softness.stage0 SEED_DIR`` on a ``budget=paths`` seed directory (its
data and its two-view warm start, as ``python -m soft_spatial.lab.softness run`` lays it out)
writes ``SEED_DIR/stage0/stage0.{md,json}``:

1. the gate evaluations of the two-view warm start at T = 1.0 (hard and fixed τ 0.9: the names,
   directories and commands Phase 0's gate stage uses, :mod:`.phase0`, so it skips them later) and
   its G1, G2, G4; the same two at T = 0.6 (d);
2. the decodes of :mod:`soft_spatial.lab.softness.oracle_decode` at fixed τ 0.9: ``oracle_mixture`` (a) on
   every m, ``oracle_guess`` (the single-guess control) and ``plain`` (no oracle) on m = 2, 3,
   mean@8, sample j of question i seeded as ``python -m soft_spatial.eval seed=0`` seeds it
   (``samples_<decode>.jsonl``, resumable by question);
3. (b) the additive column + row code of the cell embeddings (input and output) against a
   permutation baseline, and the cross-cell mass of the model's own mixtures at branch steps;
   (c) m = 1 cell accuracy on bump vs plain moves, teacher-forced and along the hard samples;
   (e) the rate of samples whose think block never closes;
4. the registered rule: Δ₀ = oracle mixture − hard on m = 2 ≥ :attr:`Stage0Config.min_gain`.

Each step is skipped when its output exists; the decodes resume at their first missing question.
"""
from __future__ import annotations

import argparse
import json
import os
import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from soft_spatial.data import build_messages, extract_answer, load_omnispatial
from soft_spatial.data.synthetic import read_rows
from soft_spatial.eval.runner import read_results
from soft_spatial.infra.signals import command
from soft_spatial.lab.softness.branches import path_rows, step_types
from soft_spatial.lab.softness.gates import GATE_EVALS, first_guess, path_accuracy
from soft_spatial.lab.softness.oracle_decode import OracleSpec, decode
from soft_spatial.lab.learning.path_views import PathTruth, trace_words, word_positions
from soft_spatial.lab.learning.warmstart import WarmStartConfig, encode
from soft_spatial.softthink import SamplingConfig, SoftThinkingConfig

__all__ = ["Stage0Config", "DECODES", "additive_code", "bump_accuracy_teacher_forced",
           "bump_accuracy_free", "never_closed", "per_question", "bootstrap_diff", "bootstrap_did",
           "decide", "decode_to_file", "same_texts", "accuracy_by_m", "run", "main"]

#: decode -> (oracle kind, the m it runs on)
DECODES = {"oracle_mixture": ("mixture", (1, 2, 3)), "oracle_guess": ("guess", (2, 3)),
           "plain": ("none", (2, 3))}
#: the two-view warm start's gate evaluations Stage 0 reads (G1, G2, G4 and the hard decode of the
#: rule), run again at T = 0.6 for (d)
MIX_GATES = {n: v for n, v in GATE_EVALS.items() if n in ("mix_hard", "mix_fixed_0.9")}


@dataclass(frozen=True)
class Stage0Config:
    """What Stage 0 registered (docs/learning.md); ``limit`` (questions per m) and
    ``permutations`` only shrink it for tests."""

    seed_dir: str
    samples: int = 8
    temperature: float = 1.0
    tau: float = 0.9
    max_new_tokens: int = 48
    eval_seed: int = 0
    warm_seed: int = 0
    distractor_mass: float = WarmStartConfig.distractor_mass
    """ε of the oracle mixtures: the warm start's soft view's."""
    min_gain: float = 10.0
    """The rule: Stage 1 goes ahead only if Δ₀ on m = 2 is at least this (points)."""
    low_temperature: float = 0.6
    """(d): G2 again at this sampling temperature."""
    permutations: int = 1000
    limit: int | None = None

    @property
    def out(self) -> Path:
        return Path(self.seed_dir) / "stage0"


# -- (b) the additive code ---------------------------------------------------------------------
def _cells(grid: int = 6) -> list[str]:
    return [f"{'abcdefgh'[x]}{y + 1}" for y in range(grid) for x in range(grid)]


def _r2(e: np.ndarray, cols: np.ndarray, rows: np.ndarray, grid: int) -> float:
    x = np.concatenate([np.ones((len(e), 1)), np.eye(grid)[cols][:, 1:], np.eye(grid)[rows][:, 1:]], 1)
    coef, *_ = np.linalg.lstsq(x, e, rcond=None)
    resid = e - x @ coef
    return 1.0 - float((resid ** 2).sum() / ((e - e.mean(0)) ** 2).sum())


def additive_code(embeddings: np.ndarray, permutations: int = 1000, seed: int = 0,
                  grid: int = 6) -> dict:
    """How well E[cell] ≈ mean + col_vec[column] + row_vec[row] fits the ``[grid², D]`` cell
    embeddings (rows in ``a1, b1, .., f6`` order: column letter, row from the top), by least
    squares over every dimension at once: R², against the R² of the same fit with the cells
    assigned to (column, row) at random (``permutations`` draws): their mean, 95th percentile and
    the share at least as high as the real fit's (p)."""
    cols = np.arange(grid * grid) % grid
    rows = np.arange(grid * grid) // grid
    r2 = _r2(embeddings.astype(np.float64), cols, rows, grid)
    rng = np.random.default_rng(seed)
    null = []
    for _ in range(permutations):
        p = rng.permutation(grid * grid)
        null.append(_r2(embeddings.astype(np.float64), cols[p], rows[p], grid))
    null = np.array(null)
    return {"r2": r2, "perm_mean": float(null.mean()), "perm_p95": float(np.quantile(null, 0.95)),
            "p": float((1 + (null >= r2).sum()) / (1 + len(null)))}


# -- (c) bump vs plain moves ---------------------------------------------------------------------
def _start(row: Mapping) -> str:
    return row["branches"][row["true_branch"]]["start"]


def _bump_flags(row: Mapping) -> list[bool]:
    cells = [_start(row)] + row["branches"][row["true_branch"]]["cells"]
    return [cells[s] == cells[s - 1] for s in range(1, len(cells))]


def bump_accuracy_free(samples: Sequence[Mapping], rows: Mapping[str, Mapping]) -> dict:
    """(c) along hard samples of m = 1 questions: at each position word while every earlier one
    was the true cell, % right, split by whether the move bumps (``bump``) or not (``plain``)."""
    hits = defaultdict(list)
    for r in samples:
        row = rows.get(r["question_id"])
        if row is None or len(row["branches"]) != 1:
            continue
        cells, flags = row["branches"][0]["cells"], _bump_flags(row)
        words = r["text"].split()
        s = 0
        for w, (kind, step) in zip(words, step_types(words, int(row["t_star"]))):
            if kind == "move":
                s = step
                continue
            if kind not in ("branch", "tracked") or not 1 <= s <= len(cells):
                continue
            ok = w == cells[s - 1]
            hits["bump" if flags[s - 1] else "plain"].append(ok)
            if not ok:
                break
    return {k: {"accuracy": 100.0 * float(np.mean(v)), "n": len(v)} for k, v in sorted(hits.items())}


@torch.no_grad()
def bump_accuracy_teacher_forced(model, processor, records, rows: Mapping[str, Mapping]) -> dict:
    """(c) teacher-forced on the true trace of every m = 1 question: % of position words the model
    predicts (argmax) right, split by whether the move bumps."""
    tok = processor.tokenizer
    hits = defaultdict(list)
    for rec in records:
        row = rows[rec.id]
        if len(row["branches"]) != 1:
            continue
        truth = PathTruth.from_row(dict(row))
        words = trace_words(truth, 0)
        ex = encode(processor, rec, " ".join(words))
        ids = ex.inputs["input_ids"][0].tolist()
        positions = word_positions(tok, ids, ex.response_start, words, "stage0")
        logits = model(**ex.inputs).logits[0]
        flags = _bump_flags(row)
        s = 0
        for w, p in zip(words, positions):
            if w in ("north", "east", "south", "west"):
                s += 1
            elif w == ":":
                break
            elif w != "circle":
                hits["bump" if flags[s - 1] else "plain"].append(int(logits[p - 1].argmax()) == ids[p])
    return {k: {"accuracy": 100.0 * float(np.mean(v)), "n": len(v)} for k, v in sorted(hits.items())}


# -- (e), accuracies and the rule ------------------------------------------------------------------
def never_closed(samples: Sequence[Mapping], think_end: str = SoftThinkingConfig.think_end) -> float:
    """% of samples whose think block never closes: ``think_end`` is not in their text (the same
    reading as the engines' ``think_closed``, in every mode; samples written before that flag was
    recorded in hard mode read alike)."""
    if not samples:
        return float("nan")
    return 100.0 * float(np.mean([think_end not in r["text"] for r in samples]))


def per_question(samples: Sequence[Mapping], rows: Mapping[str, Mapping], m: int) -> dict[str, float]:
    """``{question id: accuracy}`` over the samples of the path questions with ``m`` starts."""
    acc = defaultdict(list)
    for r in samples:
        row = rows.get(r["question_id"])
        if row is not None and len(row["branches"]) == m:
            acc[r["question_id"]].append(float(bool(r["correct"])))
    return {q: float(np.mean(v)) for q, v in acc.items()}


def bootstrap_diff(a: Mapping[str, float], b: Mapping[str, float], draws: int = 10000,
                   seed: int = 0) -> dict:
    """Mean of a − b over the questions both hold (points) and its paired bootstrap 95% CI."""
    qs = sorted(set(a) & set(b))
    d = np.array([a[q] - b[q] for q in qs]) * 100.0
    rng = np.random.default_rng(seed)
    boot = d[rng.integers(0, len(d), size=(draws, len(d)))].mean(1)
    return {"diff": float(d.mean()), "lo": float(np.quantile(boot, 0.025)),
            "hi": float(np.quantile(boot, 0.975)), "n": len(qs)}


def bootstrap_did(a1: Mapping[str, float], b1: Mapping[str, float], a2: Mapping[str, float],
                  b2: Mapping[str, float], draws: int = 10000, seed: int = 0) -> dict:
    """(a − b) on one set of questions minus (a − b) on another (points), each paired within its
    set, the sets resampled independently: mean and bootstrap 95% CI."""
    rng = np.random.default_rng(seed)
    parts = []
    for a, b in ((a2, b2), (a1, b1)):
        qs = sorted(set(a) & set(b))
        d = np.array([a[q] - b[q] for q in qs]) * 100.0
        parts.append((d.mean(), d[rng.integers(0, len(d), size=(draws, len(d)))].mean(1)))
    boot = parts[0][1] - parts[1][1]
    return {"diff": float(parts[0][0] - parts[1][0]), "lo": float(np.quantile(boot, 0.025)),
            "hi": float(np.quantile(boot, 0.975))}


def decide(delta: float, min_gain: float) -> dict:
    """The registered rule on Δ₀ (points)."""
    go = delta >= min_gain
    return {"delta": delta, "min_gain": min_gain, "stage1": go,
            "verdict": (f"Stage 1 goes ahead (Δ₀ = {delta:+.1f} >= +{min_gain:g})" if go else
                        f"the line closes (Δ₀ = {delta:+.1f} < +{min_gain:g}): no Stage 1, no "
                        f"third design")}


# -- the runs --------------------------------------------------------------------------------------
def _experiment(cfg: Stage0Config, temperature: float):
    """The learning runner's Experiment over the seed directory with the budget's settings and
    Phase 0's stages (its evaluation command, names and directories), sampling at ``temperature``."""
    from hydra import compose, initialize_config_dir

    from soft_spatial.lab.learning.config import CONFIG_DIR, LearnConfig
    from soft_spatial.lab.learning.experiment import Experiment
    from soft_spatial.lab.softness.phase0 import GATES

    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
        raw = compose("learn", overrides=["budget=paths", f"seed={cfg.eval_seed}",
                                          f"out={Path(cfg.seed_dir).resolve()}",
                                          f"eval.samples={cfg.samples}",
                                          f"eval.temperature={temperature}",
                                          f"eval.max_new_tokens={cfg.max_new_tokens}"])
    return Experiment(LearnConfig.from_omegaconf(raw), GATES)


def evaluations(cfg: Stage0Config) -> dict[str, Path]:
    """The two-view warm start's gate evaluations at T = 1.0 (``gate_<name>``, as Phase 0 names
    them) and, for (d), hard and fixed τ at T = ``low_temperature``."""
    out = {}
    for temperature, prefix in ((cfg.temperature, "gate_"),
                                (cfg.low_temperature, f"stage0_T{cfg.low_temperature:g}_")):
        exp = _experiment(cfg, temperature)
        for name, (view, mode, tau) in MIX_GATES.items():
            extra = [f"soft_thinking.fixed_tau={tau}"] if tau is not None else []
            out[prefix + name] = exp.evaluate(prefix + name, exp.warm_dir(view), mode, extra=extra)
    return out


DECODE_SAMPLE_TOP_K = 5
"""The decodes' discrete sampling filter (:attr:`SamplingConfig.top_k`: the 5 most likely tokens at
discrete steps), the one Stage 0's registered numbers were measured with; not K, the mixture's
candidates (:attr:`SoftThinkingConfig.top_k`)."""


def run_decode(cfg: Stage0Config, name: str, engine, records, rows, say=print) -> Path:
    """One of :data:`DECODES` over the test questions of its m (resumable by question)."""
    kind, ms = DECODES[name]
    soft = SoftThinkingConfig(mode="fixed", fixed_tau=cfg.tau)
    sampling = SamplingConfig(temperature=cfg.temperature, max_new_tokens=cfg.max_new_tokens,
                              top_k=DECODE_SAMPLE_TOP_K)
    return decode_to_file(cfg.out / f"samples_{name}.jsonl", name, engine, records, rows, ms, soft,
                          sampling, OracleSpec(kind, cfg.warm_seed, cfg.distractor_mass),
                          cfg.samples, cfg.eval_seed, cfg.limit, say)


def decode_to_file(path: Path, name: str, engine, records, rows, ms: Sequence[int],
                   soft: SoftThinkingConfig, sampling: SamplingConfig, spec: OracleSpec,
                   samples: int, eval_seed: int, limit: int | None = None, say=print) -> Path:
    """:func:`~soft_spatial.lab.softness.oracle_decode.decode` of the test questions with ``ms``
    starts (the first ``limit`` per m; all when None), ``samples`` each, question i seeded
    ``eval_seed + i`` as ``python -m soft_spatial.eval seed=<eval_seed>`` seeds it, appended to
    ``path`` one question at a time: a re-run resumes at the first question it lacks."""
    done = {r["question_id"] for r in read_results(path)}
    todo = [(i, rec) for i, rec in enumerate(records)
            if len(rows[rec.id]["branches"]) in ms and rec.id not in done]
    if limit is not None:
        per_m = defaultdict(int)
        keep = []
        for i, rec in enumerate(records):
            m = len(rows[rec.id]["branches"])
            if m in ms and per_m[m] < limit:
                per_m[m] += 1
                keep.append(rec.id)
        todo = [(i, rec) for i, rec in todo if rec.id in keep]
    t0 = time.time()
    with path.open("a", encoding="utf-8") as f:
        for n, (i, rec) in enumerate(todo, 1):
            row = rows[rec.id]
            lines = []
            for d in decode(engine, build_messages(rec), row, soft, sampling, samples,
                            eval_seed + i, spec):
                pred = extract_answer("omnispatial", d.text, "ours", options=rec.options)
                lines.append({"question_id": rec.id, "question_index": i, "sample": d.sample,
                              "m": len(row["branches"]), "t_star": row["t_star"], "pred": pred,
                              "correct": pred == rec.answer, "think_closed": d.think_closed,
                              "finish": d.finish, "text": d.text, "branch": d.branch,
                              "readouts": [asdict(r) for r in d.readouts]})
            f.write("".join(json.dumps(x) + "\n" for x in lines))
            f.flush()
            if n % 25 == 0 or n == len(todo):
                say(f"  {name}: {n}/{len(todo)} questions ({(time.time() - t0) / n:.2f} s each)")
    return path


def readout_means(samples: Sequence[Mapping], m: int) -> dict:
    """Means over the branch steps of the m-start samples: the model's own mixture's live mass,
    true weight, cross mass, and the cross mass expected if its off-live cell weight were spread
    evenly over the non-live cells."""
    vals = defaultdict(list)
    for r in samples:
        if r["m"] != m:
            continue
        for x in r["readouts"]:
            vals["live_mass"].append(x["live_mass"])
            vals["true_weight"].append(x["true_weight"])
            vals["cross_mass"].append(x["cross_mass"])
            vals["cross_expected"].append((x["cell_mass"] - x["live_mass"]) * x["n_cross"] / (36 - m))
    return {k: float(np.mean(v)) for k, v in vals.items()} | {"steps": len(vals["live_mass"])}


def same_texts(a: Sequence[Mapping], b: Sequence[Mapping]) -> dict:
    """How many (question, sample) pairs both hold, and the % whose texts are identical."""
    other = {(r["question_id"], r["sample"]): r["text"] for r in b}
    pairs = [(r["text"], other[r["question_id"], r["sample"]]) for r in a
             if (r["question_id"], r["sample"]) in other]
    return {"n": len(pairs), "identical": 100.0 * float(np.mean([x == y for x, y in pairs]))
            if pairs else float("nan")}


def accuracy_by_m(samples: Sequence[Mapping]) -> dict[int, float]:
    """Accuracy (%) of the decoded samples by their question's m."""
    by = defaultdict(list)
    for r in samples:
        by[r["m"]].append(float(bool(r["correct"])))
    return {m: 100.0 * float(np.mean(v)) for m, v in sorted(by.items())}


def measure(cfg: Stage0Config, evals: Mapping[str, Path], engine, records, rows,
            say=print) -> dict:
    """Every Stage-0 number from the evaluations (``evals``: name -> directory with
    ``samples.jsonl``) and the decodes (run here when missing) on ``engine``."""
    paths = path_rows(rows)
    evals_rows = {n: read_results(Path(d) / "samples.jsonl") for n, d in evals.items()}
    acc = {n: path_accuracy(Path(d) / "samples.jsonl", rows) for n, d in evals.items()}
    hard, soft9 = acc["gate_mix_hard"], acc[f"gate_mix_fixed_{cfg.tau:g}"]
    low = f"stage0_T{cfg.low_temperature:g}_"
    regen = {"G1": hard[1], "G2": soft9[2] - hard[2],
             "G4": {m: v["true"] for m, v in first_guess(Path(evals["gate_mix_hard"]) / "samples.jsonl",
                                                         rows).items() if m > 1}}
    decoded = {}
    for name in DECODES:
        say(f"2 decode {name}")
        decoded[name] = read_results(run_decode(cfg, name, engine, records, rows, say))
    dec_acc = {n: accuracy_by_m(v) for n, v in decoded.items()}
    by_q = {n: {m: per_question(v, paths, m) for m in (1, 2, 3)} for n, v in decoded.items()}
    hard_q = {m: per_question(evals_rows["gate_mix_hard"], paths, m) for m in (1, 2, 3)}
    delta = bootstrap_diff(by_q["oracle_mixture"][2], hard_q[2])
    contrasts = {f"{a} - {b}, m = {m}": bootstrap_diff(qa, qb)
                 for m in (1, 2, 3)
                 for a, b, qa, qb in (("oracle_mixture", "hard", by_q["oracle_mixture"][m], hard_q[m]),
                                      ("oracle_guess", "hard", by_q["oracle_guess"][m], hard_q[m]),
                                      ("oracle_mixture", "oracle_guess", by_q["oracle_mixture"][m],
                                       by_q["oracle_guess"][m]))
                 if qa and qb}
    # not registered, reported: the oracle's gain on m = 2 net of its cost on m = 1
    did = bootstrap_did(by_q["oracle_mixture"][1], hard_q[1], by_q["oracle_mixture"][2], hard_q[2])
    say("3 readouts: the additive code, bump accuracy")
    cell_ids = [engine.tokenizer.encode(" " + c, add_special_tokens=False)[0] for c in _cells()]
    code = {which: additive_code(w.weight[cell_ids].detach().numpy(), cfg.permutations)
            for which, w in (("input", engine.embed), ("output", engine.lm_head))}
    m1 = [r for r in records if len(rows[r.id]["branches"]) == 1][: cfg.limit]
    bumps = {"teacher_forced": bump_accuracy_teacher_forced(engine.model, engine.processor, m1, rows),
             "free_running_hard": bump_accuracy_free(evals_rows["gate_mix_hard"], paths)}
    readouts = {n: {m: readout_means(v, m) for m in DECODES[n][1]}
                for n, v in decoded.items() if n != "oracle_guess"}
    result = {
        "config": asdict(cfg), "decision": decide(delta["diff"], cfg.min_gain), "delta": delta,
        "accuracy": {"evaluations": acc, "decodes": dec_acc}, "contrasts": contrasts,
        "did_unregistered": did,
        "regenerated_gates": regen,
        "g2_low_temperature": {"temperature": cfg.low_temperature,
                               "hard": acc[low + "mix_hard"], "soft": acc[low + f"mix_fixed_{cfg.tau:g}"],
                               "G2": acc[low + f"mix_fixed_{cfg.tau:g}"][2] - acc[low + "mix_hard"][2]},
        "plain_vs_engine": same_texts(decoded["plain"], evals_rows[f"gate_mix_fixed_{cfg.tau:g}"]),
        "additive_code": code, "readouts": readouts, "bump_accuracy": bumps,
        "never_closed": {**{n: never_closed(v) for n, v in evals_rows.items()},
                         **{n: never_closed(v) for n, v in decoded.items()}},
    }
    return result


def report(result: Mapping) -> str:
    """``stage0.md``: the rule's verdict first, then every table."""
    d, dec = result["delta"], result["decision"]
    ev, de = result["accuracy"]["evaluations"], result["accuracy"]["decodes"]
    lines = [f"# Stage 0 (seed {result['config']['eval_seed']})", "",
             f"**Δ₀ = oracle mixture − hard on m = 2: {d['diff']:+.1f} points** (paired bootstrap 95% "
             f"CI [{d['lo']:+.1f}, {d['hi']:+.1f}], {d['n']} questions). Rule: ≥ +{dec['min_gain']:g}. "
             f"Verdict: {dec['verdict']}.", "",
             "| accuracy (mean@8, %) | m = 1 | m = 2 | m = 3 |", "|---|---|---|---|"]
    for name, a in list(ev.items()) + list(de.items()):
        lines.append(f"| {name} | " + " | ".join(f"{a[m]:.1f}" if m in a else "-" for m in (1, 2, 3)) + " |")
    lines += ["", "| contrast (points) | Δ | 95% CI | n |", "|---|---|---|---|"]
    for name, c in result["contrasts"].items():
        lines.append(f"| {name} | {c['diff']:+.1f} | [{c['lo']:+.1f}, {c['hi']:+.1f}] | {c['n']} |")
    did = result["did_unregistered"]
    lines += ["", f"Not registered, deciding nothing: (oracle mixture − hard) on m = 2 minus the same on "
              f"m = 1 = {did['diff']:+.1f} [{did['lo']:+.1f}, {did['hi']:+.1f}]."]
    g = result["regenerated_gates"]
    low = result["g2_low_temperature"]
    lines += ["", f"Regenerated warm start at T = 1.0: G1 {g['G1']:.1f}, G2 {g['G2']:+.1f}, G4 "
              + ", ".join(f"m = {m}: {v:.1f}" for m, v in g["G4"].items())
              + f". (d) G2 at T = {low['temperature']:g}: {low['G2']:+.1f} "
              f"({low['soft'][2]:.1f} − {low['hard'][2]:.1f}).",
              f"The plain decode against the gate evaluation at the same τ: "
              f"{result['plain_vs_engine']['identical']:.1f}% of {result['plain_vs_engine']['n']} "
              f"samples identical.", "",
              "| (b) additive code, R² | fit | permuted mean | permuted 95th pct | p |",
              "|---|---|---|---|---|"]
    for which, c in result["additive_code"].items():
        lines.append(f"| {which} embeddings | {c['r2']:.3f} | {c['perm_mean']:.3f} | "
                     f"{c['perm_p95']:.3f} | {c['p']:.4f} |")
    lines += ["", "| the model's own mixture at branch steps | m | steps | live mass | true w | cross mass "
              "| cross if even |", "|---|---|---|---|---|---|---|"]
    for name, per in result["readouts"].items():
        for m, r in per.items():
            if r["steps"]:
                lines.append(f"| {name} | {m} | {r['steps']} | {r['live_mass']:.3f} | "
                             f"{r['true_weight']:.3f} | {r['cross_mass']:.4f} | {r['cross_expected']:.4f} |")
    lines += ["", "| (c) m = 1 cell accuracy (%) | bump moves | plain moves |", "|---|---|---|"]
    for name, b in result["bump_accuracy"].items():
        lines.append(f"| {name} | " + " | ".join(
            f"{b[k]['accuracy']:.1f} (n = {b[k]['n']})" if k in b else "-" for k in ("bump", "plain")) + " |")
    lines += ["", "| (e) think block never closed (% of samples) | |", "|---|---|"]
    lines += [f"| {n} | {v:.1f} |" for n, v in result["never_closed"].items()]
    return "\n".join(lines) + "\n"


def run(cfg: Stage0Config, evals: Mapping[str, Path] | None = None, say=print) -> dict:
    """Stage 0 end to end (module docstring); ``evals`` given: those evaluation directories
    instead of running them."""
    seed_dir = Path(cfg.seed_dir)
    data, warm = seed_dir / "data", seed_dir / "models" / "warmstart"
    for need in (data / "OmniSpatial-test" / "data.json", warm / "model.safetensors"):
        if not need.is_file():
            raise FileNotFoundError(f"stage0: {need} does not exist (run python -m "
                                    f"soft_spatial.lab.softness run budget=paths out={seed_dir} first)")
    cfg.out.mkdir(parents=True, exist_ok=True)
    from soft_spatial.engines.local import LocalEngine

    if evals is None:
        say("1 evaluations of the two-view warm start (gates at T = 1.0; (d) at T = "
            f"{cfg.low_temperature:g})")
        evals = evaluations(cfg)
    rows = read_rows(data / "OmniSpatial-test")
    records = load_omnispatial(data, "test")
    engine = LocalEngine.from_pretrained(warm)
    result = measure(cfg, evals, engine, records, rows, say)
    (cfg.out / "stage0.json").write_text(json.dumps(result, indent=1))
    (cfg.out / "stage0.md").write_text(report(result))
    say(report(result))
    return result


def main(argv: Sequence[str] | None = None) -> dict:
    p = argparse.ArgumentParser(prog="python -m soft_spatial.lab.softness.stage0",
                                description=__doc__.splitlines()[0])
    p.add_argument("seed_dir", help="a budget=paths seed directory (the run command's out=)")
    p.add_argument("--limit", type=int, default=None, help="questions per m (a smoke run)")
    p.add_argument("--permutations", type=int, default=Stage0Config.permutations)
    p.add_argument("--threads", type=int, default=1,
                   help="torch threads here and in the evaluations (the tiny model decodes fastest "
                        "on one: 1.2 s a question against 22 s with two, on the shared 2-core machine)")
    a = p.parse_args(argv)
    torch.set_num_threads(a.threads)
    os.environ["OMP_NUM_THREADS"] = str(a.threads)  # the evaluations' processes inherit it
    # SIGTERM and SIGHUP as Ctrl-C: the running evaluation (tethered) ends with it, one line
    with command("python -m soft_spatial.lab.softness.stage0",
                 "the running evaluation was ended with it"):
        return run(Stage0Config(a.seed_dir, limit=a.limit, permutations=a.permutations))


if __name__ == "__main__":
    main()
