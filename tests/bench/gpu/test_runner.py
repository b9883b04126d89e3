"""The GPU kit's plan runner (soft_spatial_bench/gpu/runner.py) on real processes, with the
``selftest`` jobs: a child killed the way SGLang's SIGQUIT handler kills its engine's process tree
is recorded as failed and the next job runs; a deadline reached mid-plan keeps every finished
number; a job past its cap is ended; an ``--out`` holding another run's files is refused with
nothing changed; a SIGTERMed or SIGKILLed plan leaves no process behind (the process table, not a
time, is asserted)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from barrier import wait_for

from soft_spatial.infra import tether
from soft_spatial.infra.jsonl import read_jsonl
from soft_spatial.infra.procs import alive
from soft_spatial_bench.gpu import headline, runner
from soft_spatial_bench.gpu.jobs import Job

ROOT = Path(__file__).resolve().parents[3]


def _jobs(*spec, pid_file=None) -> list[Job]:
    return [Job("T", name, cap, 1.0, min_left=1.0,
                args={"kind": "selftest", "action": action, "number": i,
                      "pid_file": str(pid_file)})
            for i, (name, action, cap) in enumerate(spec)]


def _run(out: Path, work: Path, deadline: float, jobs, caps=None) -> int:
    return runner.run_plan(out, work, deadline, True, jobs, headline.render, ["# test", ""],
                           poll_s=0.1, caps=caps)


def _latest(out: Path) -> dict:
    recs = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    return {r["job"]: r for r in recs if r["kind"] == "job"}


def test_a_child_killed_like_sglangs_sigquit_handler_is_failed_and_the_next_job_runs(tmp_path):
    jobs = _jobs(("first", "ok", None), ("crash", "sigquit_tree", None), ("after", "ok", None))
    out = tmp_path / "out"
    assert _run(out, tmp_path / "work", 600, jobs) == 1
    latest = _latest(out)
    assert latest["first"]["status"] == "ok" and latest["first"]["values"]["number"] == 0
    assert latest["crash"]["status"] == "failed"
    assert "the child process died" in latest["crash"]["lines"][0]
    assert latest["after"]["status"] == "ok" and latest["after"]["values"]["number"] == 2
    report = (out / "report.md").read_text()
    assert "## T crash: failed" in report and "number 2" in report
    assert sorted(p.name for p in out.iterdir()) <= sorted(
        ["report.md", "results.jsonl", "log.txt", "nvidia-smi.txt", "stage-e.tar.gz"])


def test_the_exit_status_counts_the_headline_jobs_or_every_extra_asked_alone():
    jobs = _jobs(("a", "ok", None), ("b", "ok", None))
    extra = [Job("X", "grpo-resume", None, 1.0, extra=True), Job("A", "embedded", 1, 1.0, extra=True)]
    assert runner.counted(jobs + extra) == ["T/a", "T/b"]
    assert runner.counted(extra) == ["X/grpo-resume", "A/embedded"]


class _DeadlineOnceStarted:
    """The clock the runner's parent reads: the real time until ``job`` (part/name) is recorded started in
    ``out``'s results, then ``jump`` seconds later (so the plan's deadline is reached while that
    job runs, at an observable point rather than after a wait)."""

    sleep = staticmethod(time.sleep)

    def __init__(self, out: Path, job: str, jump: float):
        self.out, self.job, self.jump, self.jumped = out, job, jump, False

    def time(self) -> float:
        if not self.jumped and (self.out / "results.jsonl").exists():
            recs = read_jsonl(self.out / "results.jsonl", drop_torn_tail=True)
            self.jumped = runner.latest(recs).get(self.job, {}).get("status") == "started"
        return time.time() + self.jump * self.jumped


def test_a_deadline_reached_mid_plan_keeps_every_finished_number(tmp_path, monkeypatch):
    jobs = _jobs(("first", "ok", None), ("hangs", "hang", None), ("never", "ok", None))
    out = tmp_path / "out"
    clock = _DeadlineOnceStarted(out, "T/hangs", 3600)
    monkeypatch.setattr(runner, "time", clock)
    assert _run(out, tmp_path / "work", 600, jobs) == 1
    assert clock.jumped
    latest = _latest(out)
    assert latest["first"]["status"] == "ok" and latest["first"]["values"]["number"] == 0
    assert latest["hangs"]["status"] == "timeout"
    assert latest["hangs"]["lines"] == ["killed at the plan's deadline"]
    assert "never" not in latest or latest["never"]["status"] == "skipped"
    assert latest["end"]["values"]["not_ok"]["T/hangs"] == "timeout"
    assert "number 0" in (out / "report.md").read_text()


def test_a_job_past_its_cap_is_killed_and_the_plan_goes_on(tmp_path):
    jobs = _jobs(("hangs", "hang", 2.0), ("after", "ok", None))
    out = tmp_path / "out"
    _run(out, tmp_path / "work", 600, jobs, caps=True)
    latest = _latest(out)
    assert latest["hangs"]["status"] == "timeout"
    assert latest["hangs"]["lines"] == ["killed at its cap of 2 s"]
    assert latest["after"]["status"] == "ok"


def test_an_out_holding_another_runs_files_is_refused_and_left_as_it_was(tmp_path):
    """Issue 44/10: a plan into an --out of an earlier call kept that call's stage-e.tar.gz and
    appended to its log.txt, so what came back mixed two runs."""
    out = tmp_path / "out"
    out.mkdir()
    before = {"stage-e.tar.gz": b"an earlier run's E logs", "log.txt": b"earlier log\n",
              "report.md": b"# earlier\n"}
    for name, data in before.items():
        (out / name).write_bytes(data)
    with pytest.raises(runner.OutNotEmpty, match=r"holds log\.txt, report\.md, stage-e\.tar\.gz"):
        _run(out, tmp_path / "work", 600, _jobs(("first", "ok", None)))
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert not (tmp_path / "work").exists()
    res = subprocess.run([sys.executable, "-m", "soft_spatial_bench.gpu.headline", "--dry-run",
                          "--out", str(out), "--only", "X/sync"], capture_output=True, text=True,
                         cwd=ROOT)
    assert res.returncode == 2 and f"--out {out}: holds log.txt" in res.stderr
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    # an empty directory (the device tool's $OUT) is fine
    empty = tmp_path / "empty"
    empty.mkdir()
    assert _run(empty, tmp_path / "work2", 600, _jobs(("first", "ok", None))) == 0


def test_an_out_or_work_that_cannot_be_a_directory_is_refused_before_anything_is_written(tmp_path):
    """Issue 55 item 10: a --work that is a file failed after --out was made (a FileExistsError);
    an --out that is a file was said to hold an earlier run's files."""
    from soft_spatial.infra.dirlock import NotADirectoryOutput
    afile = tmp_path / "afile"
    afile.write_text("x")
    for out, work, named in ((tmp_path / "out", afile, f"--work {afile} is an existing file"),
                             (afile, tmp_path / "work", f"--out {afile} is an existing file"),
                             (afile / "out", tmp_path / "work", f"--out {afile / 'out'} lies under {afile}")):
        with pytest.raises(NotADirectoryOutput, match=f"^{named}"):
            _run(out, work, 600, _jobs(("first", "ok", None)))
        assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]


# the plan, in a process of its own: one job that leaves the child's session (as SGLang's
# schedulers and Ray's daemons do) and sleeps
PLAN = textwrap.dedent("""
    import sys
    from pathlib import Path
    from soft_spatial_bench.gpu import headline, runner
    from soft_spatial_bench.gpu.jobs import Job
    from soft_spatial.infra.signals import command
    job = Job("T", "orphan", None, 1.0, min_left=1.0,
              args={"kind": "selftest", "action": "orphan", "number": 0, "pid_file": sys.argv[3]})
    with command("plan"):
        sys.exit(runner.run_plan(Path(sys.argv[1]), Path(sys.argv[2]), 3600, True, [job],
                                 headline.render, ["# test"], poll_s=0.1))
""")


def _watchdogs(child_pid: int) -> list[int]:
    """The tether watchdog watching ``child_pid``'s tether (its command line names its marker)."""
    import psutil
    env = Path(f"/proc/{child_pid}/environ").read_bytes().split(b"\0")
    marker = next(e.split(b"=", 1)[1].decode() for e in env
                  if e.startswith(tether.MARKER_VAR.encode() + b"="))
    return [p.pid for p in psutil.process_iter(["cmdline"])
            if marker in (p.info["cmdline"] or []) and "--watch" in (p.info["cmdline"] or [])]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_a_killed_plan_leaves_no_process_behind(tmp_path, sig):
    """Issue 44/11: SIGTERM to the plan killed only the parent; its job child (its own session)
    went on with what it started, unwatched."""
    pid_file, out = tmp_path / "pids", tmp_path / "out"
    plan = subprocess.Popen([sys.executable, "-c", PLAN, str(out), str(tmp_path / "work"),
                             str(pid_file)], cwd=ROOT, start_new_session=True,
                            env=dict(os.environ, PYTHONPATH=str(ROOT)))
    try:
        wait_for(pid_file.exists, "the job started its orphan")
        child, grand = map(int, pid_file.read_text().split())
        assert alive(child) and alive(grand)
        wait_for(lambda: os.getsid(grand) != os.getsid(child), "the orphan left the session")
        watchdogs = _watchdogs(child)
        assert len(watchdogs) == 1
        plan.send_signal(sig)
        rc = plan.wait()
        wait_for(lambda: not alive(watchdogs[0]), "the watchdog finished")
        assert not alive(child) and not alive(grand)
        if sig == signal.SIGTERM:  # the command's exit: 143, the job recorded as killed
            assert rc == 143
            assert _latest(out)["orphan"]["status"] == "killed"
            assert _latest(out)["end"]["status"] == "killed"
        else:
            assert rc == -signal.SIGKILL
    finally:
        if plan.poll() is None:
            os.killpg(plan.pid, signal.SIGKILL)
            plan.wait()
