"""The headline plan: the GPU numbers of the next loans, each call a set of jobs, whatever breaks.
The kit's one command (``scripts/gpu/check.py`` is this module's ``main``):

    python3 scripts/gpu/check.py --plan headline --out OUT --deadline 520 --only KEYS   # on the GPU
    python3 scripts/gpu/check.py --plan headline --out OUT --lease 1.1 --deadline 520   # a loan's call
    python scripts/gpu/check.py --plan headline --out OUT --deadline 900 --dry-run      # CPU, tiny

The jobs (:mod:`.jobs`; docs/gpu.md has the table and the lease plan):

* **F** — decode throughput of one SGLang engine per job (:mod:`.graphs`): stock hard against the
  plugin's hard, fixed and adaptsoft with the same kernels (native ops or SGLang's fused ones),
  attention backend and overlap scheduling, graphs on, 64 and 8 rows × 128 steps, bf16, every
  repeat kept; the 2B-shaped model, and a pair at Qwen3-VL-8B-Thinking's shape;
* **D** and **G** — soft parity on CUDA (:mod:`.soft_parity`): the embedded engine's fp32 and fp64
  references against SGLang fp32 with graphs off (D: torch_native attention) and on (G: Triton
  attention, ``TRITON_F32_DEFAULT=ieee``), one verdict per row with docs/sglang.md's bound;
* **E** — GRPO through verl with SGLang rollouts (:mod:`.grpo`): ``E/fp32`` (the replay check
  within 1e-3 nats on soft steps, else the first divergent step and the soft inputs compared
  tensor by tensor: :mod:`.replay_inputs`), ``E/bf16`` on the parity weights, ``E/hard`` (the
  same pipeline in hard mode: the price of a step, part by part; verl's own stock GRPO is
  ``X/hard-stock``, blocked until the trainer runs a rollout without records);
* **X** — the sampler's sync check, overlap parity, hard parity, graphs off, E's resume;
* the first checks (A, B, C: the former stages a, b, c) retired having served
  (:data:`.jobs.RETIRED`); ``--stages`` names the jobs of the others (:data:`.jobs.STAGES`).

What comes back in ``OUT`` (at most 5 files): ``report.md``, ``results.jsonl``, ``log.txt``,
``stage-e.tar.gz`` (every E job's logs, metrics and controller logs) and ``nvidia-smi.txt``.
``OUT`` must be empty or new. The report names the commit from ``.gpukit/send/NN/COMMIT``
(written when the kit is staged: the device has no git history) or ``git``.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from soft_spatial_bench.gpu import jobs as plan_jobs
from soft_spatial_bench.gpu.measure import versions
from soft_spatial_bench.gpu.report import table
from soft_spatial_bench.gpu.runner import OutNotEmpty, check_out, child_main, latest, run_plan
from soft_spatial.infra.dirlock import NotADirectoryOutput
from soft_spatial.infra.signals import command

__all__ = ["render", "main", "COMMIT_FILE", "commit", "header", "GOAL", "stages_moved"]

ROOT = Path(__file__).resolve().parents[2]
COMMIT_FILE = "COMMIT"  # in each .gpukit/send/NN, written by ``kit.py stage``
GOAL = 0.95  # plugin fixed and adaptsoft ÷ stock hard, same kernels, attention and overlap


def commit() -> str:
    """The commit the kit was staged from (``COMMIT`` in a carried ``.gpukit/send/NN``), else
    git's, else unknown."""
    for f in sorted(ROOT.glob(f".gpukit/send/*/{COMMIT_FILE}")):
        return f.read_text().strip()
    res = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                         text=True)
    return res.stdout.strip() or "unknown"


def header(dry: bool, deadline_s: float, keys: list[str]) -> list[str]:
    if dry:
        device = "CPU (dry run: tiny sizes)"
    else:
        import torch
        device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no CUDA device"
    return [f"# GPU headline plan ({time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime())} UTC)", "",
            f"Device: {device}. {versions()}. Commit {commit()}. Deadline {deadline_s:.0f} s. "
            f"Jobs: `{','.join(keys)}`.", ""]


# -- the report -------------------------------------------------------------------------------------
def _ratio(a, b):
    return round(a / b, 3) if a and b else "–"


def _same_setting(v: dict) -> tuple:
    return (v.get("kernels"), v.get("attention"), v.get("overlap"), v.get("model"),
            v.get("graphs"))


def f_summary(val: dict[str, dict]) -> list[str]:
    """Plugin fixed / adaptsoft against stock hard with the same kernels, attention, overlap and
    model, at both batch sizes (the goal: ≥ 0.95)."""
    stock = {_same_setting(v): (k, v) for k, v in val.items() if v.get("engine") == "stock hard"}
    rows = []
    for k, v in val.items():
        if v.get("engine") not in ("plugin fixed", "plugin adaptsoft", "plugin hard"):
            continue
        ref_key, ref = stock.get(_same_setting(v), (None, {}))
        for n in ("big", "small"):
            r = _ratio(v.get(f"tps_{n}"), ref.get(f"tps_{n}"))
            rows.append([k, v["engine"], v.get("kernels"), v.get("attention"),
                         "on" if v.get("overlap") else "off", v.get("rows", {}).get(n, "–"),
                         v.get(f"tps_{n}", "–"), ref_key or "not run", r,
                         "–" if r == "–" or v["engine"] == "plugin hard"
                         else ("met" if r >= GOAL else "missed")])
    if not rows:
        return ["**F**: no plugin number yet.", ""]
    from soft_spatial_bench.gpu.sglang_args import FUSED_ATTENTION, FUSED_ATTENTION_WHY
    return ["**F** — the plugin against stock SGLang hard with the same kernels, attention and "
            f"overlap (goal: fixed and adaptsoft ≥ {GOAL} ×). Attention {FUSED_ATTENTION} in "
            f"every job, not what SGLang and verl pick on Hopper: {FUSED_ATTENTION_WHY}.", "",
            *table(["job", "engine", "kernels", "attention", "overlap", "rows", "tok/s",
                    "against", "÷ stock hard", "goal"], rows), ""]


def overlap_summary(val: dict[str, dict]) -> list[str]:
    """Overlap on ÷ off for each engine measured both ways (same kernels, attention, model)."""
    by = {}
    for k, v in val.items():
        if "overlap" in v and "tps_big" in v:
            by.setdefault((v["engine"], v.get("kernels"), v.get("attention"), v.get("model")),
                          {})[bool(v["overlap"])] = v
    rows = [[*key, *(_ratio(s[True].get(f"tps_{n}"), s[False].get(f"tps_{n}"))
                     for n in ("big", "small"))]
            for key, s in by.items() if True in s and False in s]
    if not rows:
        return []
    return ["**Overlap scheduling** — tok/s with overlap on ÷ off (the default is decided by "
            "this and `X/overlap-parity`):", "",
            *table(["engine", "kernels", "attention", "model", "÷ at 64 rows", "÷ at 8 rows"],
                   rows), ""]


def parity_summary(val: dict[str, dict]) -> list[str]:
    d = [(k, v) for k, v in val.items() if "verdicts" in v]
    if not d:
        return ["**D / G**: no parity verdict yet.", ""]
    return ["**D / G** — SGLang fp32 against the embedded engine, graphs off (D) and on (G) "
            "(verdict per row, docs/sglang.md's bound):", "",
            *table(["job", "mode", "graphs", "attention", "verdict", "rows within the bound",
                    "off the path", "beyond the bound"],
                   [[k, v["mode"], v.get("graphs_ran", "–"), v.get("attention", "–"),
                     "pass" if v["passed"] else "FAIL", f"{v['within_bound']}/{v['rows']}",
                     v["verdicts"]["path"], v["verdicts"]["bound"]] for k, v in d]), ""]


def e_summary(latest_recs: dict[str, dict]) -> list[str]:
    from soft_spatial_bench.gpu.grpo import REPLAY, e_summary_rows, step_price_rows
    rows = e_summary_rows(latest_recs)
    out = ["**E** — GRPO through verl with SGLang rollouts:", ""]
    if not rows:
        return out[:1] + [" not run yet.", ""]
    out += table(["job", "status", "dtype", "weights", "graphs", "verdict",
                  *(f"max {what}" for what in REPLAY.values())], rows) + [""]
    price = step_price_rows(latest_recs)
    if price:
        out += ["A step's price: adaptsoft (`E/bf16`) ÷ hard thinking on the same pipeline "
                "(`E/hard`), part by part (verl's `timing_s/*`, each step; the generation part "
                "against stock SGLang is F's plugin ÷ stock hard):", "",
                *table(["key", "what", "adaptsoft s", "hard s", "÷"], price), ""]
    return out


def render(jobs: list[dict]) -> list[str]:
    """The Markdown body from the job records (latest per job wins)."""
    done = latest(jobs)
    val = {k: r.get("values", {}) for k, r in done.items() if r["status"] == "ok"}
    out = ["## Headline", ""]
    out += f_summary(val) + overlap_summary(val) + parity_summary(val) + e_summary(done)
    for r in jobs:
        if r["status"] == "started" or r["part"] == "plan" and r["job"] == "end":
            continue
        if done.get(f"{r['part']}/{r['job']}") is not r:
            continue
        out += [f"## {r['part']} {r['job']}: {r['status']} (at {r['time']}, "
                f"+{r['elapsed_s']:.0f} s, took {r.get('values', {}).get('job_s', '–')} s)", "",
                *r.get("lines", [])]
        if r.get("tail"):
            out += ["", "```", r["tail"].rstrip(), "```"]
        out += [""]
    return out


# -- the command ------------------------------------------------------------------------------------
def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="scripts/gpu/check.py", description=__doc__.split("\n")[0])
    ap.add_argument("--plan", choices=["headline"], default="headline",
                    help="the plan (one: headline; the default)")
    ap.add_argument("--stages", help="gone: the former stages are the plan's jobs (the error "
                                     "names them)")
    ap.add_argument("--out", required=True,
                    help="directory that comes back (report, results, log); empty or new")
    ap.add_argument("--work", help="scratch (models; default: a temporary directory)")
    ap.add_argument("--deadline", type=float, default=plan_jobs.PLAN_S_PER_CALL,
                    help=f"seconds every job must end within (default "
                         f"{plan_jobs.PLAN_S_PER_CALL:.0f})")
    ap.add_argument("--dry-run", action="store_true", help="tiny sizes on the CPU")
    ap.add_argument("--only", help="comma-separated job keys to run, in plan order (docs/gpu.md's "
                                   "lease plan; default: every job)")
    ap.add_argument("--lease", help="LEASE.CALL (e.g. 1.2): that call's --only set of the lease "
                                    "plan")
    ap.add_argument("--set", action="append", default=[], metavar="JOB:KEY=VALUE",
                    help="an extra Hydra override for an E job's training command, e.g. "
                         "--set 'E/bf16:actor_rollout_ref.rollout.custom.x=true' (repeatable)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--deadline-at", type=float, help=argparse.SUPPRESS)
    return ap


def select(ap, a) -> list:
    """The jobs ``--only`` / ``--lease`` ask for, in plan order, with ``--set``'s overrides."""
    jobs = plan_jobs.plan()
    keys = None
    if a.lease:
        try:
            lease, call = map(int, a.lease.split("."))
            keys = plan_jobs.LEASES[lease - 1][call - 1]
        except (ValueError, IndexError):
            ap.error(f"--lease {a.lease}: expected LEASE.CALL with LEASE 1-"
                     f"{len(plan_jobs.LEASES)} and CALL 1-2")
    if a.only:
        keys = a.only.split(",")
    if keys is not None:
        unknown = sorted(set(keys) - {j.key for j in jobs})
        if unknown:
            ap.error(f"--only: unknown jobs {unknown}; the plan's: {[j.key for j in jobs]}")
        jobs = [j for j in jobs if j.key in keys]
    return _with_overrides(ap, jobs, a.set)


def _with_overrides(ap, jobs: list, sets: list[str]) -> list:
    from dataclasses import replace
    extra: dict[str, list[str]] = {}
    by = {j.key: j for j in jobs}
    for s in sets:
        key, sep, override = s.partition(":")
        if not sep or "=" not in override:
            ap.error(f"--set {s!r}: expected JOB:KEY=VALUE")
        if key not in by or by[key].args.get("kind") != "grpo":
            ap.error(f"--set {s!r}: {key} is not an E job of this run "
                     f"({[k for k, j in by.items() if j.args.get('kind') == 'grpo']})")
        extra.setdefault(key, []).append(override)
    return [replace(j, args={**j.args, "overrides": j.args.get("overrides", []) + extra[j.key]})
            if j.key in extra else j for j in jobs]


def stages_moved(stages: str) -> str:
    """Why ``--stages`` is refused: the command that runs those stages' jobs now."""
    names = [s.strip() for s in stages.split(",") if s.strip()]
    unknown = [s for s in names if s not in plan_jobs.STAGES and s not in plan_jobs.RETIRED]
    if unknown:
        return (f"--stages: unknown stages {unknown}; the stages were "
                f"{sorted({*plan_jobs.STAGES, *plan_jobs.RETIRED})}")
    retired = [s for s in names if s in plan_jobs.RETIRED]
    if retired:
        return (f"--stages: stages {','.join(retired)} (jobs "
                f"{','.join(plan_jobs.RETIRED[s] for s in retired)}) retired having served (H100, "
                f"2026-11-23/24); commit {plan_jobs.RETIRED_AT} is the last that holds them "
                f"(docs/gpu.md)")
    keys = list(dict.fromkeys(k for s in names for k in plan_jobs.STAGES[s]))
    return (f"--stages is gone: stages {','.join(names)} are the plan's jobs "
            f"{','.join(keys)}: python3 scripts/gpu/check.py --plan headline --only "
            f"{','.join(keys)} --out DIR (docs/gpu.md)")


def main(argv=None) -> int:
    ap = _parser()
    a = ap.parse_args(argv)
    if a.stages is not None:
        ap.error(stages_moved(a.stages))
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if a.child:
        rc = child_main(Path(a.out), Path(a.work), a.deadline_at, a.child.split(","),
                        a.dry_run, render)
        # every record is written and synced: the child ends without the interpreter's
        # finalization, 3 to 9 s of CPU on the 2-core machine with SGLang, torch and transformers
        # loaded (the parent's tether ends whatever the child left)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(rc)
    with command("scripts/gpu/check.py", "the running job's processes were ended"):
        return _plan(ap, a)


def _plan(ap, a) -> int:
    if a.deadline <= 0:
        ap.error("--deadline must be > 0 seconds")
    if not a.dry_run:
        import torch
        if not torch.cuda.is_available():
            ap.error("no CUDA device: run on a GPU machine, or pass --dry-run")
    jobs = select(ap, a)
    try:
        # a refused --out or --work is said before the header's versions (importing verl: seconds)
        check_out(Path(a.out), Path(a.work) if a.work else None)
        head = header(a.dry_run, a.deadline, [j.key for j in jobs])
        if a.work:
            return run_plan(Path(a.out), Path(a.work), a.deadline, a.dry_run, jobs, render, head)
        with tempfile.TemporaryDirectory(prefix="gpukit-headline-") as tmp:
            return run_plan(Path(a.out), Path(tmp), a.deadline, a.dry_run, jobs, render, head)
    except (OutNotEmpty, NotADirectoryOutput) as e:
        print(f"headline: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
