"""The softness experiment's Phase 1 analysis and its registered decision (docs/learning.md).

``python -m soft_spatial.lab.softness SEED_DIR [SEED_DIR ...] --out DIR`` reads each seed's
``python -m soft_spatial.lab.softness run budget=paths`` output directory (:mod:`.phase0`) and
writes ``DIR/softness.md`` and ``DIR/softness.json``:

* per seed and pooled over seeds (random effects, Hartung–Knapp 95% CI;
  :mod:`soft_spatial.lab.learning.effects`): the primary Δ = adaptsoft − hard on the ambiguous
  items (m ≥ 2), paired by question (each question's accuracy the mean over its samples, in
  points); the secondary pairs soft_fixed − hard, adaptsoft − soft_fixed, adaptsoft −
  soft_fixed_hi; the difference-in-differences against m = 1;
* adaptsoft against the hard ceilings (66.7 at m = 2, 55.6 at m = 3), the share of its advantage
  left when its export is decoded hard, pass@1/4/8 per arm on the ambiguous items;
* training health per arm (KL, never-closed responses) and whether the hard arm learns (its reward
  slope's CI above 0);
* the decision: :func:`decide` applies the registered rules to those numbers, whatever they say.
"""
from __future__ import annotations

import argparse
import json
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from soft_spatial.data.synthetic import PATH_CANDIDATES, read_rows
from soft_spatial.eval.runner import read_results
from soft_spatial.infra.run_dir import read_metrics
from soft_spatial.lab.learning.effects import (Pooled, difference_in_differences, paired_mean, pass_at_k,
                                               pool_random_effects, trend)
from soft_spatial.lab.softness.branches import accuracy_by, branch_readouts, readout_table

__all__ = ["CEILING", "Rules", "question_accuracy", "seed_effects", "pool", "decide", "main"]

#: the hard single-pass ceilings by m (a guess, then elimination when the circle never comes)
CEILING = {2: 100 * (1 / 2 + (1 / 2) / 3), 3: 100 * (1 / 3 + (2 / 3) / 3)}
PAIRS = {"primary": ("adaptsoft", "hard"), "soft_fixed-hard": ("soft_fixed", "hard"),
         "adaptsoft-soft_fixed": ("adaptsoft", "soft_fixed"),
         "adaptsoft-soft_fixed_hi": ("adaptsoft", "soft_fixed_hi")}


@dataclass(frozen=True)
class Rules:
    """The registered thresholds (docs/learning.md), in points."""

    smallest_effect: float = 5.0
    """Δ's smallest effect of interest."""
    controller_margin: float = 3.0
    """Refutation of the controller: adaptsoft − soft_fixed's upper bound below this."""
    mechanism_did: float = 3.0
    """Refutation of the mechanism: |DiD| below this with a CI including 0."""
    kl_max: float = 0.5
    """Unhealthy training: the KL above this."""
    never_closed_max: float = 0.10
    """Unhealthy training: more responses than this never close their think block."""


def question_accuracy(samples_jsonl: Path) -> dict[str, list[bool]]:
    """``{question_id: [correct per sample]}``."""
    out: dict[str, list[bool]] = defaultdict(list)
    for r in read_results(Path(samples_jsonl)):
        out[r["question_id"]].append(bool(r["correct"]))
    return out


def _points(acc: Mapping[str, list[bool]]) -> dict[str, float]:
    return {q: 100.0 * sum(v) / len(v) for q, v in acc.items()}


def _mean(acc: Mapping[str, list[bool]], qs) -> float | None:
    vals = [100.0 * sum(acc[q]) / len(acc[q]) for q in qs if q in acc]
    return sum(vals) / len(vals) if vals else None


def seed_effects(seed_dir: Path) -> dict:
    """One seed's numbers (module docstring) from its learn output directory."""
    seed_dir = Path(seed_dir)
    rows = read_rows(seed_dir / "data" / "OmniSpatial-test")
    m_of = {k: PATH_CANDIDATES[r["synthetic_task"]] for k, r in rows.items()
            if r.get("synthetic_task") in PATH_CANDIDATES}
    ambiguous = {q for q, m in m_of.items() if m > 1}
    arms, hard_decoded = {}, {}
    for d in sorted((seed_dir / "eval").glob("*_trained")):
        arms[d.name.removesuffix("_trained")] = question_accuracy(d / "samples.jsonl")
    for d in sorted((seed_dir / "eval").glob("*_trained_hard")):
        hard_decoded[d.name.removesuffix("_trained_hard")] = question_accuracy(d / "samples.jsonl")
    pts = {a: _points(v) for a, v in arms.items()}
    out: dict = {"seed_dir": str(seed_dir), "arms": sorted(arms), "pairs": {}}
    for name, (a, b) in PAIRS.items():
        if a in pts and b in pts:
            out["pairs"][name] = asdict(paired_mean(pts[a], pts[b], sorted(ambiguous)))
    if "adaptsoft" in pts and "hard" in pts:
        out["did"] = asdict(difference_in_differences(pts["adaptsoft"], pts["hard"], ambiguous))
    out["accuracy"] = {a: {str(m): _mean(acc, [q for q in m_of if m_of[q] == m]) for m in (1, 2, 3)}
                       | {"ambiguous": _mean(acc, ambiguous)} for a, acc in arms.items()}
    out["hard_decoded"] = {a: {"ambiguous": _mean(acc, ambiguous)} for a, acc in hard_decoded.items()}
    out["pass_at_k"] = {a: {str(k): 100 * sum(pass_at_k(len(v), sum(v), k) for q, v in acc.items()
                                               if q in ambiguous and len(v) >= k)
                            / max(1, sum(1 for q, v in acc.items() if q in ambiguous and len(v) >= k))
                            for k in (1, 4, 8)} for a, acc in arms.items()}
    out["by_t_star"] = {a: accuracy_by(seed_dir / "eval" / f"{a}_trained" / "samples.jsonl",
                                       rows)["t_star"] for a in arms}
    out["branches"] = {}
    for a in arms:  # the mechanism readouts of the soft arms (their exports' tokenizer)
        final, steps = seed_dir / "runs" / a / "final", seed_dir / "eval" / f"{a}_trained"
        if a != "hard" and (final / "tokenizer_config.json").is_file() and (
                steps / "steps.jsonl").is_file():
            from transformers import AutoTokenizer

            out["branches"][a] = branch_readouts(steps, rows, AutoTokenizer.from_pretrained(final))
    health = {}
    for a in arms:
        metrics = read_metrics(seed_dir / "runs" / a / "checkpoints" / "metrics.jsonl")
        kl = [m["actor/kl_loss"] for m in metrics if "actor/kl_loss" in m]
        closed = [m["soft/never_closed_rate"] for m in metrics if "soft/never_closed_rate" in m]
        reward = [m["critic/score/mean"] for m in metrics if "critic/score/mean" in m]
        health[a] = {"kl_max": max(kl) if kl else None,
                     "never_closed_max": max(closed) if closed else None,
                     "reward_trend": trend(reward)}
    out["health"] = health
    gates = seed_dir / "gates.json"
    out["gates_passed"] = json.loads(gates.read_text())["passed"] if gates.is_file() else None
    return out


def pool(seeds: Sequence[dict], key: str) -> Pooled | None:
    """The pooled estimate of pair ``key`` (or ``"did"``) over the seeds that have it."""
    got = [s["pairs"][key] if key != "did" else s["did"] for s in seeds
           if (key == "did" and "did" in s) or key in s.get("pairs", {})]
    if not got:
        return None
    return pool_random_effects([g["mean"] for g in got], [max(g["variance"], 1e-12) for g in got])


def decide(seeds: Sequence[dict], rules: Rules = Rules()) -> dict:
    """The registered decision (docs/learning.md) on the seeds' numbers: ``{"outcome", "reasons"}``
    with outcome one of ``support``, ``partial support``, ``refutation``, ``inconclusive``."""
    reasons: list[str] = []
    if any(s.get("gates_passed") is False for s in seeds):
        return {"outcome": "inconclusive", "reasons": ["a Phase 0 gate failed in a seed"]}
    for s in seeds:
        for arm, h in s["health"].items():
            if h["kl_max"] is not None and h["kl_max"] > rules.kl_max:
                reasons.append(f"{arm} in {s['seed_dir']}: KL {h['kl_max']:.3f} > {rules.kl_max}")
            if h["never_closed_max"] is not None and h["never_closed_max"] > rules.never_closed_max:
                reasons.append(f"{arm} in {s['seed_dir']}: {100 * h['never_closed_max']:.0f}% "
                               f"never closed")
        lo = s["health"].get("hard", {}).get("reward_trend", {}).get("slope_lo")
        if lo is not None and lo <= 0:
            reasons.append(f"the hard arm does not learn in {s['seed_dir']} (reward slope CI "
                           f"includes 0)")
    if reasons:
        return {"outcome": "inconclusive", "reasons": reasons}
    primary = pool(seeds, "primary")
    if primary is None or primary.lo is None:
        return {"outcome": "inconclusive", "reasons": ["fewer than two seeds with the primary"]}
    per_seed = [s["pairs"]["primary"]["mean"] for s in seeds if "primary" in s["pairs"]]
    did = pool(seeds, "did")
    fixed = pool(seeds, "adaptsoft-soft_fixed")
    hi = pool(seeds, "adaptsoft-soft_fixed_hi")
    e = rules.smallest_effect
    if primary.hi < e or primary.hi < 0:
        return {"outcome": "refutation", "reasons": [
            f"of the method: Δ = {primary.estimate:+.1f} [{primary.lo:+.1f}, {primary.hi:+.1f}], "
            f"upper bound below +{e:g}"]}
    if fixed is not None and fixed.hi is not None and fixed.hi < rules.controller_margin and (
            hi is None or hi.estimate <= 0):
        reasons.append(f"of the controller: adaptsoft - soft_fixed upper bound {fixed.hi:+.1f} < "
                       f"+{rules.controller_margin:g} and adaptsoft <= soft_fixed_hi")
    if primary.estimate >= e and did is not None and did.lo is not None and (
            abs(did.estimate) < rules.mechanism_did and did.lo <= 0 <= did.hi):
        reasons.append(f"of the mechanism: DiD {did.estimate:+.1f} [{did.lo:+.1f}, {did.hi:+.1f}]")
    if reasons:
        return {"outcome": "refutation", "reasons": reasons}
    if (min(per_seed) > 0) != (max(per_seed) > 0) or (primary.lo < 0 < primary.hi and primary.hi >= e):
        return {"outcome": "inconclusive", "reasons": [
            f"Δ = {primary.estimate:+.1f} [{primary.lo:+.1f}, {primary.hi:+.1f}] per seed "
            f"{', '.join(f'{x:+.1f}' for x in per_seed)}: seeds disagree in sign or the CI "
            f"straddles 0 and +{e:g}"]}
    above = all(s["accuracy"]["adaptsoft"][str(m)] is not None
                and s["accuracy"]["adaptsoft"][str(m)] > CEILING[m] for s in seeds for m in (2, 3))
    kept = []
    for s in seeds:
        adv = s["pairs"]["primary"]["mean"]
        dec = s["hard_decoded"].get("adaptsoft", {}).get("ambiguous")
        hard = s["accuracy"]["hard"]["ambiguous"]
        if dec is not None and adv > 0:
            kept.append((dec - hard) / adv)
    needs = {"Δ >= +5 with CI above 0 and positive in every seed":
             primary.estimate >= e and primary.lo > 0 and min(per_seed) > 0,
             "DiD CI above 0": did is not None and did.lo is not None and did.lo > 0,
             "adaptsoft above the hard ceiling at m = 2 and 3": above,
             "hard decoding loses at least half the advantage": bool(kept) and max(kept) <= 0.5}
    if all(needs.values()):
        credit = hi is not None and hi.estimate >= 0
        return {"outcome": "support", "reasons": [k for k in needs] + [
            "credit to the adaptive τ" if credit else "a constant high τ explains the gain"]}
    return {"outcome": "partial support" if needs["Δ >= +5 with CI above 0 and positive in every seed"]
            else "inconclusive", "reasons": [f"not met: {k}" for k, v in needs.items() if not v]}


def _fmt(p: Pooled | None) -> str:
    if p is None:
        return "-"
    ci = f" [{p.lo:+.1f}, {p.hi:+.1f}]" if p.lo is not None else ""
    return f"{p.estimate:+.1f}{ci}"


def write(seeds: Sequence[dict], out: Path, rules: Rules = Rules()) -> dict:
    """``softness.md`` and ``softness.json`` under ``out``; returns the JSON."""
    out.mkdir(parents=True, exist_ok=True)
    pooled = {k: pool(seeds, k) for k in [*PAIRS, "did"]}
    decision = decide(seeds, rules)
    lines = ["| effect (points, ambiguous items) | " + " | ".join(
        Path(s["seed_dir"]).name for s in seeds) + " | pooled [95% CI] |",
        "|---|" + "---|" * len(seeds) + "---|"]
    for k in [*PAIRS, "did"]:
        vals = [(s["did"] if k == "did" else s["pairs"].get(k)) for s in seeds]
        lines.append(f"| {k} | " + " | ".join(
            f"{v['mean']:+.1f}" if v else "-" for v in vals) + f" | {_fmt(pooled[k])} |")
    lines += ["", f"**Decision: {decision['outcome']}** — " + "; ".join(decision["reasons"]), ""]
    for s in seeds:
        if s.get("branches"):
            lines += [f"Branch steps, {Path(s['seed_dir']).name} (lab/softness/branches.py):", "",
                      readout_table(s["branches"])]
    result = {"seeds": seeds, "pooled": {k: asdict(v) if v else None for k, v in pooled.items()},
              "decision": decision, "rules": asdict(rules), "ceiling": CEILING}
    (out / "softness.json").write_text(json.dumps(result, indent=2, default=str))
    (out / "softness.md").write_text("\n".join(lines) + "\n")
    return result


def main(argv: Sequence[str] | None = None) -> dict:
    p = argparse.ArgumentParser(prog="python -m soft_spatial.lab.softness",
                                description=__doc__.splitlines()[0])
    p.add_argument("seeds", nargs="+", type=Path,
                   help="budget=paths output directories (the run command's out=), one per seed")
    p.add_argument("--out", type=Path, required=True)
    a = p.parse_args(argv)
    missing = [str(d) for d in a.seeds if not (d / "eval").is_dir()]
    if missing:
        raise SystemExit(f"no eval/ in {missing}: run python -m soft_spatial.lab.softness run "
                         f"budget=paths with the arms there first")
    result = write([seed_effects(d) for d in a.seeds], a.out)
    print((a.out / "softness.md").read_text())
    return result


if __name__ == "__main__":
    main()
