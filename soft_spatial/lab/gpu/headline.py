"""The headline plan: the three GPU numbers from one device call, whatever breaks.

    python -m soft_spatial.lab.gpu.headline --out OUT --deadline 510         # on the GPU
    python -m soft_spatial.lab.gpu.headline --out OUT --deadline 900 --dry-run   # CPU, tiny sizes
    (``scripts/gpu/check.py --plan headline ...`` is the same command)

In this order, each number written the moment it exists (:mod:`.report`):

1. **F — soft decoding at hard speed** (:mod:`.graphs`): the shared 2B-shaped model (built once, on
   the device: :func:`.context.shared_model`); stock SGLang hard with CUDA graphs (SGLang's
   defaults: overlap on), stock with overlap off (the plugin's default), the plugin hard, the
   plugin fixed, all graphs on; 64 and 8 rows × 128 steps, bf16, median of 3; ratios against the
   goals (≥ 0.9 × stock hard, ≥ 0.95 × plugin hard).
2. **D — soft parity on CUDA at the 2B shape** (:mod:`.soft_parity`): the embedded engine's fp32
   and fp64 references, then SGLang fp32 for fixed and adaptsoft: a verdict per row.
3. **E — GRPO through verl with SGLang rollouts on one GPU** (:mod:`.grpo`): one run to step 2,
   its timeout what remains; CUDA graphs off if F's plugin graphs-on engine failed.
4. Extras, each only while at least its ``min_left`` seconds remain: adaptsoft graphs on, the
   sampler's sync check, hard parity, overlap on, graphs off, E's checkpoint and resume, and
   SGLang's fused kernels instead of native ops.

Crash containment: the jobs run in a child process (its own session); an SGLang scheduler that
fails sends SIGQUIT to its engine's process, whose handler kills that process's tree, i.e. the
child, never this one. This parent watches the child, kills it (and every process it started) when
a job outlives its cap or the deadline, records the job as failed or timed out with the last
lines of the log, and starts a new child for the jobs left. Native ops are on for every engine of
the plan but the last extra (:data:`soft_spatial.compat.sglang.NATIVE_OPS_ENV`).

What comes back in ``OUT`` (at most 5 files): ``report.md``, ``results.jsonl``, ``log.txt``,
``stage-e.tar.gz`` (E's logs, metrics and controller logs) and ``nvidia-smi.txt``. The report
names the commit from ``.gpukit/send/NN/COMMIT`` (written when the kit is staged: the device
has no git history) or ``git``.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

from soft_spatial.lab.gpu.measure import versions
from soft_spatial.lab.gpu.report import LiveReport, Skip, StageFailed, stamp, table

__all__ = ["Job", "plan", "render", "run_plan", "main", "COMMIT_FILE", "commit"]

ROOT = Path(__file__).resolve().parents[3]
COMMIT_FILE = "COMMIT"          # in each .gpukit/send/NN, written by ``kit.py stage``
RUN_MARKER = "SOFT_SPATIAL_GPUKIT_RUN"  # in every process a plan starts: found and killed by it
LOG, STAGE_E_TAR, SMI = "log.txt", "stage-e.tar.gz", "nvidia-smi.txt"
GOALS = {"stock": 0.9, "plugin hard": 0.95}


@dataclass(frozen=True)
class Job:
    """One piece of the plan. ``cap_s``: the most it may take on a GPU (None: what remains);
    ``needs``: jobs that must have finished ok; ``min_left``: seconds that must remain to start
    it; ``args``: its parameters."""

    part: str
    name: str
    cap_s: float | None
    needs: tuple[str, ...] = ()
    extra: bool = False
    min_left: float = 20.0
    args: dict = field(default_factory=dict)

    @property
    def key(self) -> str:
        return f"{self.part}/{self.name}"

    def to_dict(self) -> dict:
        return {"part": self.part, "name": self.name, "cap_s": self.cap_s,
                "needs": list(self.needs), "extra": self.extra, "min_left": self.min_left,
                "args": self.args}

    @classmethod
    def from_dict(cls, d: dict) -> "Job":
        return cls(**dict(d, needs=tuple(d["needs"])))


def _f(name, cap, needs=("model/build",), extra=False, **spec):
    return Job("F" if not extra else "X", name, cap, needs, extra, 60.0 if extra else 20.0,
               {"kind": "engine", **spec})


def plan(extras: bool = True) -> list[Job]:
    """The jobs in order (docstring of the module)."""
    jobs = [
        Job("model", "build", 150, args={"kind": "model"}),
        _f("stock-hard", 130, engine="stock", mode="hard", graphs=True, overlap=True),
        _f("stock-hard-overlap-off", 120, engine="stock", mode="hard", graphs=True, overlap=False),
        _f("plugin-hard", 130, engine="plugin", mode="hard", graphs=True),
        _f("plugin-fixed", 130, engine="plugin", mode="fixed", graphs=True),
        Job("D", "references", 150, ("model/build",), args={"kind": "refs",
                                                            "modes": ["fixed", "adaptsoft"]}),
        Job("D", "fixed", 130, ("D/references",), args={"kind": "parity", "mode": "fixed"}),
        Job("D", "adaptsoft", 130, ("D/references",), args={"kind": "parity", "mode": "adaptsoft"}),
        Job("E", "grpo", None, min_left=90.0, args={"kind": "grpo", "resume": False}),
    ]
    if extras:
        jobs += [
            _f("plugin-adaptsoft", 130, extra=True, engine="plugin", mode="adaptsoft", graphs=True),
            Job("X", "sync", 90, extra=True, min_left=60.0, args={"kind": "sync"}),
            Job("X", "references-hard", 120, ("model/build",), True, 60.0,
                {"kind": "refs", "modes": ["hard"]}),
            Job("X", "parity-hard", 130, ("X/references-hard",), True, 60.0,
                {"kind": "parity", "mode": "hard"}),
            _f("plugin-fixed-overlap-on", 130, extra=True, engine="plugin", mode="fixed",
               graphs=True, overlap=True),
            _f("plugin-fixed-graphs-off", 130, extra=True, engine="plugin", mode="fixed",
               graphs=False),
            Job("X", "grpo-resume", None, extra=True, min_left=240.0,
                args={"kind": "grpo", "resume": True}),
            _f("stock-hard-fused", 130, extra=True, engine="stock", mode="hard", graphs=True,
               overlap=True, native=False),
            _f("plugin-fixed-fused", 130, extra=True, engine="plugin", mode="fixed", graphs=True,
               native=False),
        ]
    return jobs


# -- the child: runs jobs in order ----------------------------------------------------------------
def _latest(records: list[dict]) -> dict[str, dict]:
    """{job key: its latest record}."""
    return {f"{r['part']}/{r['job']}": r for r in records if r.get("kind") == "job"}


def run_job(ctx, job: Job, records: dict[str, dict]) -> tuple[dict, list[str]]:
    """Run one job in this process; returns (values, report lines)."""
    from soft_spatial.lab.gpu import graphs, grpo, soft_parity
    from soft_spatial.lab.gpu.context import shared_model
    a = job.args
    if a["kind"] == "model":
        model, _, facts = shared_model(ctx)
        return facts, [f"Qwen3-VL {'tiny' if ctx.dry_run else '2B'}-shaped, random weights: "
                       + ", ".join(f"{k} {v}" for k, v in facts.items())]
    if a["kind"] == "engine":
        spec = graphs.EngineSpec(a["engine"], a["mode"], a.get("graphs", True),
                                 a.get("overlap", False), a.get("native", True))
        return graphs.engine_throughput(ctx, spec)
    if a["kind"] == "refs":
        return soft_parity.references(ctx, tuple(a["modes"]))
    if a["kind"] == "parity":
        return soft_parity.engine(ctx, a["mode"])
    if a["kind"] == "sync":
        return _sync(ctx)
    if a["kind"] == "call":  # "module:function"(ctx, job) -> (values, lines): plans built in code
        import importlib
        module, _, name = a["call"].partition(":")
        return getattr(importlib.import_module(module), name)(ctx, job)
    if a["kind"] == "grpo":
        plugin = [records.get(f"F/plugin-{m}", {}).get("status") for m in ("hard", "fixed")]
        graphs_on = ctx.dry_run or all(s == "ok" for s in plugin)
        return grpo.run(out=ctx.work / ("e-out-resume" if a["resume"] else "e-out"),
                        work=ctx.work / ("e-resume" if a["resume"] else "e"), dry=ctx.dry_run,
                        quick=True, deadline_at=ctx.deadline_at - 5,
                        plan=grpo.RESUME if a["resume"] else grpo.ONE_RUN, graphs=graphs_on)
    raise ValueError(f"unknown job kind {a['kind']!r}")


def _sync(ctx) -> tuple[dict, list[str]]:
    """The soft sampler never waits for the device: stage f's ``sync`` part."""
    from soft_spatial.lab.gpu.graphs import sampler_sync
    lines: list[str] = []
    waits = sampler_sync(ctx, lines)
    if waits:
        raise StageFailed(lines)
    return {"waits": waits}, lines


PLAN_FILE = "plan.json"  # in the scratch directory: the jobs, for the child


def child_main(out: Path, work: Path, deadline_at: float, keys: list[str], dry: bool) -> int:
    """Run the jobs ``keys`` of the plan in ``work/plan.json`` in order, recording each (started,
    then its result)."""
    from soft_spatial.lab.gpu.context import KitContext
    report = LiveReport(out, render)
    jobs = {j.key: j for j in map(Job.from_dict, json.loads((work / PLAN_FILE).read_text()))}
    ctx = KitContext(dry, "cpu" if dry else "cuda", work, out, deadline_at, report)
    for key in keys:
        job = jobs[key]
        latest = _latest(report.records())
        failed = [n for n in job.needs if latest.get(n, {}).get("status") != "ok"]
        if failed:
            report.record(job.part, job.name, "skipped", lines=[f"needs {', '.join(failed)}"])
            continue
        if ctx.remaining() < job.min_left:
            report.record(job.part, job.name, "skipped", lines=[
                f"{ctx.remaining():.0f} s left, it needs {job.min_left:.0f} s to start"])
            continue
        report.record(job.part, job.name, "started", cap_s=job.cap_s)
        t0 = time.time()
        try:
            values, lines = run_job(ctx, job, latest)
            status, tail = "ok", None
        except Skip as e:
            values, lines, status, tail = {}, [str(e)], "skipped", None
        except StageFailed as e:
            values, lines, status, tail = {}, e.lines, "failed", None
        except Exception:
            values, lines, status, tail = {}, [], "failed", traceback.format_exc()
        report.record(job.part, job.name, status, values={**values, "job_s": round(time.time() - t0, 1)},
                      lines=lines, tail=tail)
    return 0


# -- the parent: watches the child ----------------------------------------------------------------
def _kill_all(proc: subprocess.Popen, marker: str) -> None:
    """Kill the child's tree and every process carrying this run's marker (Ray's daemons too)."""
    import psutil

    from soft_spatial.infra.procs import find_pids
    pids = set()
    try:
        parent = psutil.Process(proc.pid)
        pids |= {p.pid for p in parent.children(recursive=True)} | {proc.pid}
    except psutil.Error:
        pass
    pids |= set(find_pids(environ=lambda env: env.get(RUN_MARKER) == marker))
    pids.discard(os.getpid())
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        pass


def _tail(path: Path, start: int, chars: int = 3000) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(max(start, os.path.getsize(path) - chars))
            return f.read().decode(errors="replace")
    except OSError:
        return ""


def run_plan(out: Path, work: Path, deadline_s: float, dry: bool, extras: bool = True,
             poll_s: float = 1.0, jobs: list[Job] | None = None) -> int:
    """Run ``jobs`` (default: :func:`plan`) with ``deadline_s`` seconds from now; returns 0 when
    every job that is not an extra finished ok, 1 otherwise."""
    t0 = time.time()
    deadline_at = t0 + deadline_s
    out.mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    report = LiveReport(out, render)
    report.start(header(dry, deadline_s), t0=t0, deadline_at=deadline_at)
    _smi(out / SMI)
    jobs = plan(extras) if jobs is None else jobs
    (work / PLAN_FILE).write_text(json.dumps([j.to_dict() for j in jobs]))
    marker = f"{os.getpid()}-{t0:.0f}"
    shown = 1  # records echoed to stdout (the header is not)
    log = out / LOG
    env = dict(os.environ, **{RUN_MARKER: marker},
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    env.setdefault("SGLANG_IS_FLASHINFER_AVAILABLE", "false")  # its JIT sources are not carried
    while True:
        latest = _latest(report.records())
        todo = [j.key for j in jobs if latest.get(j.key, {}).get("status") in (None, "started")]
        if not todo or time.time() > deadline_at - 5:
            break
        cmd = [sys.executable, "-m", "soft_spatial.lab.gpu.headline", "--child", ",".join(todo),
               "--out", str(out), "--work", str(work), "--deadline-at", str(deadline_at)]
        cmd += ["--dry-run"] * dry
        start = log.stat().st_size if log.exists() else 0
        with open(log, "ab") as f:
            proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, cwd=ROOT,
                                    start_new_session=True)
        why = None
        while proc.poll() is None:
            time.sleep(poll_s)
            recs = report.records()
            shown = _echo(recs, shown)
            running = [r for r in recs if r.get("kind") == "job"][-1:]
            if time.time() > deadline_at:
                why = "the plan's deadline"
            elif running and running[0]["status"] == "started" and running[0].get("cap_s"):
                began = time.time() - (t0 + running[0]["elapsed_s"])
                if began > running[0]["cap_s"]:
                    why = f"its cap of {running[0]['cap_s']:.0f} s"
            if why:
                _kill_all(proc, marker)
        _kill_all(proc, marker)  # what a finished child left behind (SGLang, Ray)
        latest = _latest(report.records())
        stuck = [k for k in todo if latest.get(k, {}).get("status") == "started"]
        for key in stuck:
            part, name = key.split("/", 1)
            status = "timeout" if why else "failed"
            report.record(part, name, status, tail=_tail(log, start), lines=[
                f"killed at {why}" if why else f"the child process died (exit {proc.returncode}) "
                                               f"while it ran: the end of the log below"])
        recs = report.records()
        if any(_latest(recs).get(k, {}).get("status") not in (None, "started")
               for k in ("E/grpo", "X/grpo-resume")):
            _tar_stage_e(work, out / STAGE_E_TAR)  # E's logs now, in case the call is cut short
        shown = _echo(recs, shown)
        if not stuck and proc.returncode == 0:
            break
    _tar_stage_e(work, out / STAGE_E_TAR)
    latest = _latest(report.records())
    headline = [j.key for j in jobs if not j.extra]
    report.record("plan", "end", "done", values={
        "ok": [k for k in headline if latest.get(k, {}).get("status") == "ok"],
        "not_ok": {k: latest.get(k, {}).get("status", "not run") for k in headline
                   if latest.get(k, {}).get("status") != "ok"}})
    print(f"report: {out / 'report.md'} ({stamp(t0)})", flush=True)
    return 0 if all(latest.get(k, {}).get("status") == "ok" for k in headline) else 1


def _echo(recs: list[dict], shown: int) -> int:
    """Print the records after the first ``shown`` as progress lines; returns how many there are."""
    for r in recs[shown:]:
        print(f"[+{r.get('elapsed_s', 0):.0f} s {r.get('time', '')[11:19]}Z] {r.get('part')} "
              f"{r.get('job')}: {r.get('status')} "
              + json.dumps({k: v for k, v in r.get("values", {}).items()
                            if not isinstance(v, (dict, list))}, default=str)[:240], flush=True)
    return len(recs)


def _tar_stage_e(work: Path, dest: Path) -> None:
    """E's logs, metrics and controller logs as one tarball (one file of the five)."""
    dirs = [d for d in (work / "e-out", work / "e-out-resume") if d.is_dir()]
    if not dirs:
        return
    tmp = dest.with_name(dest.name + ".tmp")
    with tarfile.open(tmp, "w:gz") as tar:
        for d in dirs:
            tar.add(d, arcname=d.name)
    tmp.replace(dest)


def _smi(path: Path) -> None:
    exe = shutil.which("nvidia-smi")
    text = "nvidia-smi not found\n"
    if exe:
        try:
            text = subprocess.run([exe], capture_output=True, text=True, timeout=30).stdout
        except (OSError, subprocess.SubprocessError) as e:
            text = f"nvidia-smi failed: {e}\n"
    path.write_text(text)


def commit() -> str:
    """The commit the kit was staged from (``COMMIT`` in a carried ``.gpukit/send/NN``), else
    git's, else unknown."""
    for f in sorted(ROOT.glob(f".gpukit/send/*/{COMMIT_FILE}")):
        return f.read_text().strip()
    res = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                         text=True)
    return res.stdout.strip() or "unknown"


def header(dry: bool, deadline_s: float) -> list[str]:
    import torch
    device = "CPU (dry run: tiny sizes)" if dry else (
        torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no CUDA device")
    return [f"# GPU headline plan ({time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime())} UTC)", "",
            f"Device: {device}. {versions()}. Commit {commit()}. Deadline {deadline_s:.0f} s. "
            f"SGLang's ops: native (PyTorch `forward_native`) in every engine but the "
            f"`*-fused` extras.", ""]


# -- the report -------------------------------------------------------------------------------------
def _ratio(a, b):
    return round(a / b, 3) if a and b else "–"


def render(jobs: list[dict]) -> list[str]:
    """The Markdown body from the job records (latest per job wins)."""
    latest = _latest(jobs)
    val = {k: r.get("values", {}) for k, r in latest.items() if r["status"] == "ok"}
    out = ["## Headline", ""]
    f_keys = [k for k in latest if k.startswith("F/") or (k.startswith("X/") and "engine" in
                                                          latest[k].get("values", {}))]
    stock = val.get("F/stock-hard", {})
    stock_off = val.get("F/stock-hard-overlap-off", {})
    hard = val.get("F/plugin-hard", {})
    rows = []
    for k in ("F/plugin-fixed", "X/plugin-adaptsoft"):
        v = val.get(k)
        if not v:
            continue
        for n in ("big", "small"):
            x = v.get(f"tps_{n}")
            rows.append([v["engine"], v["rows"][n], x, _ratio(x, stock.get(f"tps_{n}")),
                         _ratio(x, stock_off.get(f"tps_{n}")), _ratio(x, hard.get(f"tps_{n}"))])
    if rows:
        out += ["**F** — soft decoding with CUDA graphs against the goals (≥ 0.9 × stock hard, "
                "≥ 0.95 × plugin hard; tok/s):", ""]
        out += table(["engine", "rows", "tok/s", "÷ stock hard (overlap on)",
                      "÷ stock hard (overlap off)", "÷ plugin hard"], rows) + [""]
    else:
        out += ["**F**: no soft graphs-on number yet.", ""]
    d = [val[k] for k in ("D/fixed", "D/adaptsoft", "X/parity-hard") if k in val]
    if d:
        out += ["**D** — SGLang fp32 against the embedded engine (verdict per row, "
                "docs/sglang.md's bound):", ""]
        out += table(["mode", "verdict", "rows within the bound", "ok", "ill-conditioned",
                      "off the path", "beyond the bound", "soft steps"],
                     [[v["mode"], "pass" if v["passed"] else "FAIL",
                       f"{v['within_bound']}/{v['rows']}", v["verdicts"]["ok"],
                       v["verdicts"]["ill-conditioned"], v["verdicts"]["path"],
                       v["verdicts"]["bound"], v["soft_step_fraction"]] for v in d]) + [""]
    else:
        out += ["**D**: no parity verdict yet.", ""]
    e = latest.get("E/grpo")
    out += [f"**E**: {e['status'] if e else 'not run'}"
            + (f" — steps {e['values'].get('steps')}, controller equal at every sync: "
               f"{e['values'].get('sync_equal')}" if e and e["status"] == "ok" else ""), ""]
    if f_keys:
        out += ["## F — engines (bf16, text prompts, 128 steps, eos ignored, median of 3; "
                "a dry run: fp32, 8 steps, once)", ""]
        out += table(["job", "status", "engine", "graphs", "replayed / eager batches", "overlap",
                      "ops", "start s", "tok/s big batch", "tok/s small batch", "soft steps"],
                     [[k, latest[k]["status"], v.get("engine", ""), v.get("graphs", ""),
                       (f"{v['graph_batches']['replayed']} / {v['graph_batches']['eager']}"
                        if "graph_batches" in v else "–"),
                       v.get("overlap", ""), ("native" if v.get("native_ops") else "fused")
                       if v else "", v.get("start_s", ""), v.get("tps_big", ""), v.get("tps_small", ""),
                       v.get("soft_step_fraction", "–")]
                      for k in f_keys for v in [latest[k].get("values", {})]])
        if stock.get("tps_big") and stock_off.get("tps_big"):
            out += ["", f"Overlap scheduling in stock SGLang: off ÷ on = "
                        f"{_ratio(stock_off['tps_big'], stock['tps_big'])} at "
                        f"{stock['rows']['big']} rows, "
                        f"{_ratio(stock_off.get('tps_small'), stock.get('tps_small'))} at "
                        f"{stock['rows']['small']} rows."]
        out += [""]
    for r in jobs:
        if r["status"] == "started" or r["part"] == "plan" and r["job"] == "end":
            continue
        if latest.get(f"{r['part']}/{r['job']}") is not r:
            continue
        out += [f"## {r['part']} {r['job']}: {r['status']} (at {r['time']}, +{r['elapsed_s']:.0f} s, "
                f"took {r.get('values', {}).get('job_s', '–')} s)", "", *r.get("lines", [])]
        if r.get("tail"):
            out += ["", "```", r["tail"].rstrip(), "```"]
        out += [""]
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m soft_spatial.lab.gpu.headline",
                                 description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="directory that comes back (report, results, log)")
    ap.add_argument("--work", help="scratch (models; default: a temporary directory)")
    ap.add_argument("--deadline", type=float, default=510.0,
                    help="seconds every part must end within (default 510)")
    ap.add_argument("--dry-run", action="store_true", help="tiny sizes on the CPU")
    ap.add_argument("--no-extras", dest="extras", action="store_false")
    ap.add_argument("--only", help="comma-separated job keys to run (e.g. E/grpo), in plan order")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--deadline-at", type=float, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if a.child:
        return child_main(Path(a.out), Path(a.work), a.deadline_at, a.child.split(","),
                          a.dry_run)
    if a.deadline <= 0:
        ap.error("--deadline must be > 0 seconds")
    if not a.dry_run:
        import torch
        if not torch.cuda.is_available():
            ap.error("no CUDA device: run on a GPU machine, or pass --dry-run")
    jobs = plan(a.extras)
    if a.only:
        keys = a.only.split(",")
        unknown = sorted(set(keys) - {j.key for j in jobs})
        if unknown:
            ap.error(f"--only: unknown jobs {unknown}; the plan's: {[j.key for j in jobs]}")
        jobs = [j for j in jobs if j.key in keys]
    if a.work:
        return run_plan(Path(a.out), Path(a.work), a.deadline, a.dry_run, a.extras, jobs=jobs)
    with tempfile.TemporaryDirectory(prefix="gpukit-headline-") as tmp:
        return run_plan(Path(a.out), Path(tmp), a.deadline, a.dry_run, a.extras, jobs=jobs)


if __name__ == "__main__":
    sys.exit(main())
