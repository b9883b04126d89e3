"""The GPU kit's per-stage command (``scripts/gpu/check.py``, which is this module's ``main``).

Validate and measure the GPU path in one command, writing a Markdown report.

    python3 scripts/gpu/check.py                       # every stage, on the GPU
    python3 scripts/gpu/check.py --stages a,b --out report.md
    python scripts/gpu/check.py --dry-run              # each stage's logic on the CPU, tiny sizes

Stages (each independent; a stage whose packages are missing is skipped with the reason):
  a  the embedded engine (LocalEngine) on CUDA with a random Qwen3-VL-8B-Thinking-shaped model
     (built from its config, bf16, no download): soft decoding with noise 0 and τ→0 equals greedy
     decoding; hard vs fixed vs adaptsoft decode throughput at 8 prompts × G=8 with images.
  b  softthink at real sizes (V=151,936, D=4,096, N up to 32k): exact gradient alignment's time
     and peak memory against the naive per-step V×D form, Gumbel-density and replay throughput.
  c  one actor update through verl's FSDP2 engine on one GPU (a Qwen3-VL-2B-shaped language
     model): hard vs soft_fixed vs adaptsoft time and peak memory, each mode in its own process.
  e  GRPO through verl with SGLang rollouts on one GPU (soft_spatial/bench/gpu/grpo.py): 2 steps with a
     checkpoint and a resume; time split, peak memory, replay consistency, controller sync.
Stages d and f are the headline plan's jobs now (--plan headline): D/G (SGLang parity with the
embedded engine, graphs off and on), F (throughput against stock SGLang), X/sync and
X/overlap-parity (docs/gpu.md).

The report is rewritten after every stage, so a run cut short keeps what finished. Timings
synchronise the device and take the median of repeats after a warm-up. SIGTERM (``timeout``),
SIGINT and SIGHUP end the kit as Ctrl-C does: the running stage's children (tethered:
``infra/tether.py``) end with it, its ``gpukit-*`` scratch folder is removed, exit 128 + the signal.
"""
from __future__ import annotations

import argparse
import datetime
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path

from soft_spatial.bench.gpu import actor_update, embedded, grpo, headline, softthink_sizes
from soft_spatial.bench.gpu.measure import Ctx, Report, free_memory, versions
from soft_spatial.bench.gpu.report import JobFailed, Skip, StageFailed
from soft_spatial.infra.dirlock import NotADirectoryOutput, check_dir_path
from soft_spatial.infra.signals import command

__all__ = ["STAGES", "main"]

ROOT = Path(__file__).resolve().parents[3]


def stage_e(ctx: Ctx) -> list[str]:
    """Step 1 with its checkpoint, then a resume to step 2 (soft_spatial.bench.gpu.grpo), each run
    within ``$SOFT_SPATIAL_STAGE_E_TIMEOUT`` seconds of the stage's start (default 900)."""
    deadline = time.time() + float(os.environ.get("SOFT_SPATIAL_STAGE_E_TIMEOUT", 900))
    spec = grpo.ESpec(dtype="bfloat16", weights="tiny", steps=2, resume=True)
    try:
        values = grpo.run(spec, out=ctx.report.path.parent / "stage-e", work=ctx.workdir / "e",
                          dry=ctx.dry_run, deadline_at=deadline)
    except JobFailed as e:
        raise StageFailed(grpo.render(e.values)) from e
    return grpo.render(values)


STAGES = {"a": ("a. Embedded engine on CUDA (Qwen3-VL-8B shape)", embedded.stage_a),
          "b": ("b. softthink at real sizes", softthink_sizes.stage_b),
          "c": ("c. One actor update through verl's FSDP2 engine", actor_update.stage_c),
          "e": ("e. GRPO through verl with SGLang rollouts on one GPU", stage_e)}
MOVED = {"d": "D/references,D/fixed,D/adaptsoft,G/fixed,G/adaptsoft",
         "f": "X/sync,F/stock-hard,F/plugin-fixed,F/plugin-adaptsoft,X/overlap-parity"}


def check_report_path(out: Path, stages: list[str]) -> str | None:
    """Why ``--out`` cannot take the stage mode's Markdown report (a file, rewritten through
    ``OUT.tmp`` after every stage; stage e's logs go to ``stage-e/`` beside it), or None. Checked
    before the first stage: a report that cannot be written lost every stage's results."""
    if out.is_dir():
        return (f"--out {out} is an existing directory; the stage mode writes its report to a file "
                f"(e.g. --out {out / 'gpu-report.md'}; a directory is --plan headline's --out)")
    try:
        check_dir_path(out.parent, "--out")
    except NotADirectoryOutput:
        return f"--out {out} lies under an existing file, not a directory"
    tmp, logs = out.with_name(out.name + ".tmp"), out.parent / "stage-e"
    if tmp.is_dir():
        return f"--out {out}: {tmp} is a directory (the report is written through it)"
    if "e" in stages and (logs.exists() or logs.is_symlink()) and not logs.is_dir():
        return f"--out {out}: {logs} is a file (stage e writes its logs into a folder there)"
    return None


def main(argv=None) -> int:
    with command("scripts/gpu/check.py", "its children were ended and its scratch folder removed"):
        return _main(argv)


def _main(argv) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 2)[2])
    ap.add_argument("--stages", default="a,b,c,e", help="comma-separated stages (default all)")
    ap.add_argument("--out", default="gpu-report.md", help="Markdown report path")
    ap.add_argument("--dry-run", action="store_true",
                    help="run every stage's logic on the CPU at tiny sizes (no GPU needed)")
    ap.add_argument("--quick", action="store_true", help="smaller real sizes (fewer steps)")
    ap.add_argument("--plan", choices=["headline"],
                    help="run a plan instead of stages: 'headline' is F, D and E in one device "
                         "call (soft_spatial/bench/gpu/headline.py); --out is then a directory")
    ap.add_argument("--deadline", type=float, default=520.0,
                    help="--plan: seconds every job must end within (default 520)")
    ap.add_argument("--work", help="--plan: scratch directory (default: a temporary one)")
    ap.add_argument("--only", help="--plan: comma-separated job keys to run (e.g. E/grpo)")
    ap.add_argument("--lease", help="--plan: LEASE.CALL, that call's jobs of docs/gpu.md's lease plan")
    ap.add_argument("--set", action="append", default=[], metavar="JOB:KEY=VALUE",
                    help="--plan: an extra Hydra override for an E job (repeatable)")
    a = ap.parse_args(argv)
    if a.plan:
        out = "gpu-headline" if a.out == "gpu-report.md" else a.out
        return headline.main(["--out", out, "--deadline", str(a.deadline)]
                             + ["--dry-run"] * a.dry_run
                             + (["--work", a.work] if a.work else [])
                             + (["--only", a.only] if a.only else [])
                             + (["--lease", a.lease] if a.lease else [])
                             + [x for s in a.set for x in ("--set", s)])
    import torch
    stages = [s.strip() for s in a.stages.split(",") if s.strip()]
    moved = [s for s in stages if s in MOVED]
    if moved:
        ap.error(f"stages {moved} are the headline plan's jobs now: --plan headline --only "
                 + ",".join(MOVED[s] for s in moved) + " (docs/gpu.md)")
    unknown = [s for s in stages if s not in STAGES]
    if unknown:
        ap.error(f"unknown stages {unknown}; choose from {sorted(STAGES)}")
    refused = check_report_path(Path(a.out), stages)
    if refused:
        ap.error(refused)
    if not a.dry_run and not torch.cuda.is_available():
        ap.error("no CUDA device: run on a GPU machine, or pass --dry-run")
    device = "cpu" if a.dry_run else "cuda"
    gpu = "CPU (dry run)" if a.dry_run else torch.cuda.get_device_name(0)
    commit = headline.commit()
    header = [f"# GPU kit report ({datetime.date.today().isoformat()})", "",
              f"Device: {gpu}. {versions()}. Commit {commit}"
              + (" (dry run: tiny sizes on the CPU)" if a.dry_run else "") + ".", ""]
    report = Report(Path(a.out), header)
    with tempfile.TemporaryDirectory(prefix="gpukit-") as tmp:
        ctx = Ctx(a.dry_run, a.quick, device, report, Path(tmp))
        failed = 0
        for s in stages:
            title, fn = STAGES[s]
            print(f"== {title}", flush=True)
            t0 = time.perf_counter()
            try:
                lines, status = fn(ctx), "ok"
            except Skip as e:
                lines, status = [str(e)], "skipped"
            except StageFailed as e:
                failed += 1
                lines, status = e.lines, "failed"
            except Exception:
                failed += 1
                lines, status = ["```", traceback.format_exc()[-6000:], "```"], "failed"
                free_memory()
            report.add(title, status, lines, time.perf_counter() - t0)
            print("\n".join([status] + lines), flush=True)
        if ctx.notes:
            report.add("Findings", "attention", [f"- {x}" for x in ctx.notes], 0.0)
    print(f"report: {a.out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
