"""Helpers of the process-lifetime tests (tests/e2e/test_lifetime.py): a real command whose child
is a stand-in, signalled, then every process of the run looked for in the process table.

Run as a script, this module is the command with its child replaced (the command's own ``main``,
its own tether, its own cleanup; only the child's command line differs)::

    python tests/support/lifetime.py export|ablation|kit PIDS_FILE ARGS...

The GPU kit's plan runs its jobs in a child process of its own, so there the stand-in is a job
(``selftest``'s orphan: the plan's child writes ``PIDS_FILE`` once its own child left its session).
Elsewhere the stand-in (:data:`STUB`) writes ``PIDS_FILE`` once it has started what a real child starts: a
process that leaves its session (as SGLang's schedulers do) and one that stays in it with an empty
environment (as Ray's agents, whose setproctitle wipes it); with ``--mkdir DIR`` it first writes
into ``DIR`` (export's ``OUT.partial``), with ``--lock DIR`` it holds ``DIR``'s lock (a training run
directory's), and then it sleeps until ended.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from barrier import hangup_default, interrupt, wait_for

from soft_spatial.infra.procs import alive

SUPPORT = Path(__file__).resolve().parent
ROOT = SUPPORT.parents[1]

STUB = """
import os, subprocess, sys, time
pids, args = sys.argv[1], sys.argv[2:]
if "--mkdir" in args:
    out = args[args.index("--mkdir") + 1]
    os.makedirs(out, exist_ok=True)
    open(os.path.join(out, "config.json"), "w").write("{}")
if "--lock" in args:
    from soft_spatial.infra.dirlock import DirLock
    lock = DirLock(args[args.index("--lock") + 1], "training run directory").acquire()
# each says it is in place (the one away has left the session) before the pids are written
away = subprocess.Popen([sys.executable, "-c", "import os, time; os.setsid(); print(flush=True); "
                         "time.sleep(600)"], stdout=subprocess.PIPE)
wiped = subprocess.Popen([sys.executable, "-c", "import time; print(flush=True); time.sleep(600)"],
                         env={}, stdout=subprocess.PIPE)
away.stdout.readline(), wiped.stdout.readline()
with open(pids + ".tmp", "w") as f:
    f.write(f"{os.getpid()} {away.pid} {wiped.pid}")
os.replace(pids + ".tmp", pids)
time.sleep(600)
"""


def command(which: str, pids: Path, *args: str) -> list[str]:
    """The command ``which`` with its child replaced by the stand-in (module doc)."""
    return [sys.executable, str(Path(__file__)), which, str(pids), *map(str, args)]


def env(**extra: str) -> dict[str, str]:
    """This environment with the checkout first on ``PYTHONPATH`` (the stand-in imports it)."""
    path = os.pathsep.join(filter(None, [str(ROOT), str(SUPPORT), os.environ.get("PYTHONPATH")]))
    return dict(os.environ, PYTHONPATH=path, **extra)


def signal_run(argv: list[str], pids_file: Path, sig: int, environ: dict | None = None,
               cwd: Path = ROOT, held=None) -> str:
    """Start ``argv`` (a command whose child writes ``pids_file`` once it started its own
    processes), send it ``sig`` once it has (``held(proc)`` first, when given), and check that it
    ends as a command interrupted by ``sig`` ends (exit 128 + the signal, one line, no traceback)
    and that no process of its child is left (the process table, polled until they are gone: a
    generous bound, not a timing). Returns the command's stderr."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=cwd, env=environ or env(), start_new_session=True,
                            preexec_fn=hangup_default)
    pids: list[int] = []
    try:
        wait_for(lambda: pids_file.exists() or proc.poll() is not None, "the child started",
                 limit_s=600.0)
        assert proc.poll() is None, proc.communicate()
        pids = [int(p) for p in pids_file.read_text().split()]
        assert pids and all(map(alive, pids))
        if held is not None:
            held(proc)
        err = interrupt(proc, sig)
        wait_for(lambda: not any(map(alive, pids)), "every process of the run gone", limit_s=60.0)
        return err
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        kill(pids)


def kill(pids: list[int]) -> None:
    """SIGKILL what is left of ``pids`` after a failed test."""
    for pid in pids:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)


def comm(pid: int) -> str:
    """The process's name (``/proc/PID/comm``)."""
    return Path(f"/proc/{pid}/comm").read_text().strip()


def cmdline(pid: int) -> bytes:
    """The process's command line as the kernel shows it (a renamed process's title)."""
    return Path(f"/proc/{pid}/cmdline").read_bytes()


def _main(which: str, pids: str, argv: list[str]) -> int | None:
    def stub(*extra) -> list[str]:
        return [sys.executable, "-c", STUB, pids, *map(str, extra)]

    if which == "export":
        import soft_spatial.export as export
        export.merge_command = lambda actor, target: stub("--mkdir", target)
        return export.main(argv)
    if which == "ablation":
        from soft_spatial.lab.paper import ablation
        ablation.RowRun.train_cmd = lambda self: stub("--lock", self.train_dir)
        ablation.main(argv)
        return 0
    if which == "kit":  # the plan's one job: the runner's own orphan (its child leaves the session)
        from soft_spatial_bench.gpu import headline, jobs
        jobs.plan = lambda: [jobs.Job("T", "orphan", None, 1.0, min_left=1.0, args={
            "kind": "selftest", "action": "orphan", "number": 0, "pid_file": pids})]
        return headline.main(argv)
    raise SystemExit(f"unknown command {which!r}")


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1], sys.argv[2], sys.argv[3:]))
