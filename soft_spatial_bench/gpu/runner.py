"""Runs a plan's jobs: a watched child process measures them one by one; this parent keeps the
deadline, each job's cap and what comes back.

Every kind of job is two functions in :data:`KINDS`: ``measure(ctx, job) -> result`` (a
dataclass of its kind, whose fields go to ``results.jsonl`` as the record's ``values``) and
``render(result) -> lines`` (its section of the report). A job that fails after measuring part of
what it measures raises :class:`~.report.JobFailed` with its result as far as it got.

Containment: the child runs in its own session, tethered to this process
(:mod:`soft_spatial.infra.tether`): when this process ends by any means — its return, SIGTERM,
SIGKILL — the child and everything it started (SGLang's schedulers, Ray's daemons, E's training
run, which leave the child's session but carry the tether's marker) are killed. An SGLang
scheduler that fails sends SIGQUIT to its engine's process, whose handler kills that process's
tree: the child, never this one; the job is then recorded as failed with the log's last lines and
a new child starts for the jobs left. A job past its cap, or any job at the deadline, is killed
with all it started and recorded as timed out. SIGTERM, SIGINT or SIGHUP to this process records
the running job as killed, ends the child's tree and raises on (the command's
:func:`~soft_spatial.infra.signals.command` exits 128 + the signal).

``--out`` must be empty or new: a plan never writes over or appends to another run's files
(what comes back would mix two runs).
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tarfile
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

from soft_spatial.infra import tether
from soft_spatial.infra.dirlock import check_dir_path
from soft_spatial.infra.signals import exit_status, sigterm_raises
from soft_spatial_bench.gpu.jobs import Job
from soft_spatial_bench.gpu.report import JobFailed, LiveReport, Skip, stamp

__all__ = ["KINDS", "run_plan", "child_main", "OutNotEmpty", "latest", "counted", "LOG",
           "STAGE_E_TAR", "SMI", "PLAN_FILE"]

ROOT = Path(__file__).resolve().parents[2]
LOG, STAGE_E_TAR, SMI = "log.txt", "stage-e.tar.gz", "nvidia-smi.txt"
PLAN_FILE = "plan.json"  # in the scratch directory: the jobs, for the child


class OutNotEmpty(FileExistsError):
    """``--out`` holds another run's files."""


def _kinds() -> dict[str, tuple[Callable, Callable]]:
    from soft_spatial_bench.gpu import (context, graphs, grpo, overlap, sampler_bench, selftest,
                                        soft_parity)
    return {"model": (context.measure_model, context.render_model),
            "engine": (graphs.measure, graphs.render),
            "sampler": (sampler_bench.measure, sampler_bench.render),
            "refs": (soft_parity.measure_references, soft_parity.render_references),
            "parity": (soft_parity.measure_parity, soft_parity.render_parity),
            "overlap": (overlap.measure, overlap.render),
            "sync": (graphs.measure_sync, graphs.render_sync),
            "grpo": (grpo.measure, grpo.render),
            "selftest": (selftest.measure, selftest.render)}


class _Kinds(dict):
    """The table of job kinds, filled on first use (its modules import torch)."""

    def __missing__(self, kind):
        self.update(_kinds())
        if kind not in self:
            raise KeyError(f"unknown job kind {kind!r}; the kinds: {sorted(self)}")
        return self[kind]


KINDS = _Kinds()


def latest(records: list[dict]) -> dict[str, dict]:
    """{job key: its latest record}."""
    return {f"{r['part']}/{r['job']}": r for r in records if r.get("kind") == "job"}


# -- the child: runs jobs in order ----------------------------------------------------------------
def run_job(ctx, job: Job) -> tuple[str, dict, list[str], str | None]:
    """(status, values, report lines, traceback) of one job run in this process: the values are
    its result's fields (with ``failure``: why it failed), the lines its rendering."""
    measure, render = KINDS[job.args["kind"]]
    result = why = tail = None
    try:
        result, status = measure(ctx, job), "ok"
    except Skip as e:
        return "skipped", {}, [str(e)], None
    except JobFailed as e:
        result, status, why = e.result, "failed", str(e)
    except Exception:
        status, tail = "failed", traceback.format_exc()
    values = asdict(result) if result is not None else {}
    try:
        lines = render(result) if result is not None else []
    except Exception:  # a partial result the renderer does not expect: the values as they are
        lines = ["```", json.dumps(values, default=str, indent=1)[:4000], "```"]
    if why:
        values["failure"] = why
        lines += ["", f"**Failed**: {why}"]
    return status, values, lines, tail


def child_main(out: Path, work: Path, deadline_at: float, keys: list[str], dry: bool,
               render) -> int:
    """Run the jobs ``keys`` of the plan in ``work/plan.json`` in order, recording each (started,
    then its result)."""
    from soft_spatial_bench.gpu.context import KitContext
    report = LiveReport(out, render)
    jobs = {j.key: j for j in map(Job.from_dict, json.loads((work / PLAN_FILE).read_text()))}
    ctx = KitContext(dry, "cpu" if dry else "cuda", work, out, deadline_at, report)
    for key in keys:
        job = jobs[key]
        done = latest(report.records())
        failed = [n for n in job.needs if done.get(n, {}).get("status") != "ok"]
        if failed:
            report.record(job.part, job.name, "skipped", lines=[f"needs {', '.join(failed)}"])
            continue
        if ctx.remaining() < job.min_left:
            report.record(job.part, job.name, "skipped", lines=[
                f"{ctx.remaining():.0f} s left, it needs {job.min_left:.0f} s to start"])
            continue
        report.record(job.part, job.name, "started", cap_s=job.cap_s)
        t0 = time.time()
        status, values, lines, tail = run_job(ctx, job)
        report.record(job.part, job.name, status,
                      values={**values, "job_s": round(time.time() - t0, 1)}, lines=lines,
                      tail=tail)
    return 0


# -- the parent: watches the child ----------------------------------------------------------------
def check_out(out: Path, work: Path | None = None) -> None:
    """Refuse an ``--out`` that holds anything (another run's report, log or E's logs), and an
    ``--out`` or ``--work`` that cannot be a directory (a file at it or above it:
    `~soft_spatial.infra.dirlock.NotADirectoryOutput`). Reads only."""
    check_dir_path(out, "--out")
    if work is not None:
        check_dir_path(work, "--work")
    if out.is_dir() and any(out.iterdir()):
        held = sorted(p.name for p in out.iterdir())
        raise OutNotEmpty(f"--out {out}: holds {', '.join(held[:8])}"
                          f"{' …' if len(held) > 8 else ''} from an earlier run; the plan writes "
                          f"only into an empty or new directory (what comes back must be one "
                          f"run's): choose another, or move those files away")


def _tail(path: Path, start: int, chars: int = 3000) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(max(start, os.path.getsize(path) - chars))
            return f.read().decode(errors="replace")
    except OSError:
        return ""


def _watch(child: tether.Tethered, report: LiveReport, t0: float, deadline_at: float,
           poll_s: float, shown: int, caps: bool) -> tuple[str | None, int]:
    """Wait for ``child``; end it at the deadline or (``caps``) when its running job passes its
    cap. Returns (why it was ended or None, records shown)."""
    while child.poll() is None:
        time.sleep(poll_s)
        recs = report.records()
        shown = _echo(recs, shown)
        running = [r for r in recs if r.get("kind") == "job"][-1:]
        why = None
        if time.time() > deadline_at:
            why = "the plan's deadline"
        elif caps and running and running[0]["status"] == "started" and running[0].get("cap_s"):
            if time.time() - (t0 + running[0]["elapsed_s"]) > running[0]["cap_s"]:
                why = f"its cap of {running[0]['cap_s']:.0f} s"
        if why:
            tether.stop(child)
            return why, shown
    return None, shown


def _record_stuck(report: LiveReport, todo: list[str], why: str | None, rc, log: Path,
                  start: int, status: str | None = None) -> list[str]:
    """Record the jobs the child left "started" as ``status`` (default: timed out if ended for
    ``why``, else failed)."""
    done = latest(report.records())
    stuck = [k for k in todo if done.get(k, {}).get("status") == "started"]
    for key in stuck:
        part, name = key.split("/", 1)
        report.record(part, name, status or ("timeout" if why else "failed"),
                      tail=_tail(log, start), lines=[
            f"killed at {why}" if why else f"the child process died (exit {rc}) while it ran: "
                                           f"the end of the log below"])
    return stuck


def run_plan(out: Path, work: Path, deadline_s: float, dry: bool, jobs: list[Job], render,
             header: list[str], poll_s: float = 1.0, caps: bool | None = None) -> int:
    """Run ``jobs`` with ``deadline_s`` seconds from now; returns 0 when every job counted
    (:func:`counted`) finished ok, 1 otherwise; after SIGTERM, SIGINT or SIGHUP raises on once the
    running job is recorded as killed. Refuses a non-empty ``out`` and an ``out`` or ``work`` that
    cannot be a directory, before anything is written. ``caps``: end a job past its cap (default:
    on a GPU; a GPU's seconds mean nothing on a busy CPU)."""
    check_out(out, work)
    t0 = time.time()
    deadline_at = t0 + deadline_s
    out.mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    report = LiveReport(out, render)
    report.start(header, t0=t0, deadline_at=deadline_at)
    _smi(out / SMI)
    (work / PLAN_FILE).write_text(json.dumps([j.to_dict() for j in jobs]))
    with sigterm_raises():  # SIGTERM and SIGHUP raise as SIGINT does
        try:
            _loop(out, work, deadline_at, dry, jobs, report, t0, poll_s,
                  (not dry) if caps is None else caps)
        except KeyboardInterrupt as e:  # recorded, then on to the command's exit
            _tar_stage_e(work, out / STAGE_E_TAR)
            _end(report, jobs, out, t0, exit_status(e))
            raise
    _tar_stage_e(work, out / STAGE_E_TAR)
    return _end(report, jobs, out, t0, None)


def _loop(out, work, deadline_at, dry, jobs, report, t0, poll_s, caps) -> None:
    log, shown = out / LOG, 1
    env = dict(os.environ,
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    env.setdefault("SGLANG_IS_FLASHINFER_AVAILABLE", "false")  # its JIT sources are not carried
    while True:
        done = latest(report.records())
        todo = [j.key for j in jobs if done.get(j.key, {}).get("status") in (None, "started")]
        if not todo or time.time() > deadline_at - 5:
            return
        cmd = [sys.executable, "-m", "soft_spatial_bench.gpu.headline", "--child", ",".join(todo),
               "--out", str(out), "--work", str(work), "--deadline-at", str(deadline_at)]
        cmd += ["--dry-run"] * dry
        start = log.stat().st_size if log.exists() else 0
        child = None
        try:
            with open(log, "ab") as f:
                child = tether.start(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
            why, shown = _watch(child, report, t0, deadline_at, poll_s, shown, caps)
        except KeyboardInterrupt as e:
            _record_stuck(report, todo, f"the plan's {signal.Signals(exit_status(e) - 128).name}",
                          None, log, start, "killed")
            raise
        finally:
            if child is not None:
                tether.stop(child)  # what the child left behind (SGLang, Ray), or all of it
        stuck = _record_stuck(report, todo, why, child.returncode, log, start)
        if any(latest(report.records()).get(k, {}).get("status") not in (None, "started")
               for k in todo if k.startswith("E/") or k == "X/grpo-resume"):
            _tar_stage_e(work, out / STAGE_E_TAR)  # E's logs now, in case the call is cut short
        shown = _echo(report.records(), shown)
        if not stuck and child.returncode == 0:
            return


def counted(jobs: list[Job]) -> list[str]:
    """The jobs the plan's exit status counts: those that are not extras, or all of them when
    every job is one (``--only X/grpo-resume`` fails when it fails)."""
    return [j.key for j in jobs if not j.extra] or [j.key for j in jobs]


def _end(report: LiveReport, jobs: list[Job], out: Path, t0: float, killed: int | None) -> int:
    """The plan's end record and status: 0 when every counted job is ok, 1 otherwise, ``killed``
    (128 + the signal) when a signal ended it."""
    done = latest(report.records())
    headline = counted(jobs)
    report.record("plan", "end", "killed" if killed else "done", values={
        "ok": [k for k in headline if done.get(k, {}).get("status") == "ok"],
        "not_ok": {k: done.get(k, {}).get("status", "not run") for k in headline
                   if done.get(k, {}).get("status") != "ok"}})
    print(f"report: {out / 'report.md'} ({stamp(t0)})", flush=True)
    if killed:
        return killed
    return 0 if all(done.get(k, {}).get("status") == "ok" for k in headline) else 1


def _echo(recs: list[dict], shown: int) -> int:
    """Print the records after the first ``shown`` as progress lines; returns how many there are."""
    for r in recs[shown:]:
        print(f"[+{r.get('elapsed_s', 0):.0f} s {r.get('time', '')[11:19]}Z] {r.get('part')} "
              f"{r.get('job')}: {r.get('status')} "
              + json.dumps({k: v for k, v in r.get("values", {}).items()
                            if not isinstance(v, (dict, list))}, default=str)[:240], flush=True)
    return len(recs)


def _tar_stage_e(work: Path, dest: Path) -> None:
    """E's logs, metrics and controller logs (every E job's ``e-*-out``) as one tarball."""
    dirs = sorted(d for d in work.glob("e-*-out") if d.is_dir())
    if not dirs:
        return
    tmp = dest.with_name(dest.name + ".tmp")
    with tarfile.open(tmp, "w:gz") as tar:
        for d in dirs:
            tar.add(d, arcname=d.name)
    tmp.replace(dest)


def _smi(path: Path) -> None:
    import shutil
    exe = shutil.which("nvidia-smi")
    text = "nvidia-smi not found\n"
    if exe:
        try:
            text = subprocess.run([exe], capture_output=True, text=True, timeout=30).stdout
        except (OSError, subprocess.SubprocessError) as e:
            text = f"nvidia-smi failed: {e}\n"
    path.write_text(text)
