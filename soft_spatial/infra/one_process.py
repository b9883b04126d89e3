"""Several of the project's commands in one process: ``python -m soft_spatial.infra.one_process
[--log LOG] -m MODULE ARG... [--next [--log LOG] -m MODULE ARG...]...``.

Each ``-m MODULE ARG...`` runs as ``python -m MODULE ARG...`` would (`runpy.run_module` as
``__main__``, with ``sys.argv`` set to its arguments: the same configuration, checks, keys, resume
and files), one after the other in the order given; its standard output and error (file
descriptors 1 and 2, so its children's too) go to ``LOG`` (appended, after a ``$ command`` line),
or stay this command's without one. The first that fails (exits non-zero) ends the command with
its exit status, the rest not run, after the end of its log on standard error.

What it saves is the interpreter's start and the imports (torch, transformers: about 5 s of CPU
per command on 2 cores, most of a tiny model's evaluation or warm start): the learning runner's
stages that run several commands of one module in a row (its warm starts, Phase 0's gate
evaluations; lab/learning/experiment.py) run them through it. What the commands share besides is
what a module keeps between calls in one process (caches keyed by what they hold, Python's
warnings shown once). SIGTERM, SIGHUP and SIGINT end it as they end one command
(`infra.signals`: the running command's cleanup runs, exit 128 + the signal).
"""
from __future__ import annotations

import os
import runpy
import signal
import sys
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from soft_spatial.infra.signals import SIGNALS, command
from soft_spatial.infra.tether import log_tail

__all__ = ["Run", "parse", "command_line", "main"]

PROG = "python -m soft_spatial.infra.one_process"
NEXT = "--next"
#: a command's exit status after SIGINT, SIGTERM or SIGHUP (`infra.signals.command`: 128 + the signal)
INTERRUPTED = tuple(128 + s for s in (signal.SIGINT, *SIGNALS))


@dataclass(frozen=True)
class Run:
    """One command: ``python -m module *args``, its output appended to ``log`` (None: not moved)."""

    module: str
    args: tuple[str, ...]
    log: Path | None = None


def parse(argv: Sequence[str]) -> list[Run]:
    """The runs of a command line (module docstring); a ValueError naming what is wrong."""
    runs, chunk = [], []
    for a in [*argv, NEXT]:
        if a != NEXT:
            chunk.append(a)
            continue
        log = None
        if chunk[:1] == ["--log"]:
            if len(chunk) < 2:
                raise ValueError("--log needs a path")
            log, chunk = Path(chunk[1]), chunk[2:]
        if len(chunk) < 2 or chunk[0] != "-m":
            raise ValueError(f"each run is [--log LOG] -m MODULE ARG..., got {' '.join(chunk) or 'nothing'}")
        runs.append(Run(chunk[1], tuple(chunk[2:]), log))
        chunk = []
    return runs


def command_line(runs: Sequence[Run]) -> list[str]:
    """The arguments (after ``python -m soft_spatial.infra.one_process``) that run ``runs``."""
    out: list[str] = []
    for i, r in enumerate(runs):
        out += ([NEXT] if i else []) + (["--log", str(r.log)] if r.log else []) + ["-m", r.module,
                                                                                   *r.args]
    return out


def _status(e: SystemExit) -> int:
    if e.code is None:
        return 0
    if isinstance(e.code, int):
        return e.code
    print(e.code, file=sys.stderr)  # what the interpreter prints for a message
    return 1


def _run(r: Run) -> int:
    """``python -m r.module *r.args`` in this process; its exit status (an exception: its
    traceback printed, 1, as the interpreter does)."""
    saved = sys.argv
    sys.argv = [r.module, *r.args]  # runpy puts the module's file first, as -m does
    try:
        runpy.run_module(r.module, run_name="__main__", alter_sys=True)
    except SystemExit as e:
        return _status(e)
    except Exception:  # noqa: BLE001 - the command's own failure, reported as python -m reports it
        traceback.print_exc()
        return 1
    finally:
        sys.argv = saved
        _reopen_closed()
    return 0


def _reopen_closed() -> None:
    """A command may close ``sys.stdout`` or ``sys.stderr`` (``with outfile:``): new ones on the
    same descriptors for the next."""
    for name, fd in (("stdout", 1), ("stderr", 2)):
        if getattr(sys, name).closed:
            setattr(sys, name, open(fd, "w", buffering=1, closefd=False))


def _with_output(r: Run) -> int:
    """`_run` with file descriptors 1 and 2 on ``r.log`` (restored after)."""
    if r.log is None:
        return _run(r)
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    r.log.parent.mkdir(parents=True, exist_ok=True)
    try:
        with r.log.open("a") as f:
            f.write(f"\n$ {sys.executable} -m {r.module} {' '.join(r.args)}\n")
            f.flush()
            os.dup2(f.fileno(), 1)
            os.dup2(f.fileno(), 2)
            try:
                return _run(r)
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        os.close(saved[0])
        os.close(saved[1])


def main(argv: Sequence[str] | None = None) -> int:
    try:
        runs = parse(sys.argv[1:] if argv is None else argv)
    except ValueError as e:
        raise SystemExit(f"{PROG}: {e}") from None
    with command(PROG, "the commands that finished are kept; the running one stopped as it stops"):
        for i, r in enumerate(runs):
            status = _with_output(r)
            if status in INTERRUPTED:  # the command said so in its log (`infra.signals.command`)
                print(f"{PROG}: python -m {r.module} interrupted (exit {status}; run {i + 1} of "
                      f"{len(runs)}, the rest not run)", file=sys.stderr, flush=True)
                return status
            if status:
                tail = log_tail(r.log) if r.log is not None else ""
                print(f"{tail}{PROG}: python -m {r.module} failed (exit {status}; run {i + 1} of "
                      f"{len(runs)}, the rest not run)" + (f"; log {r.log}" if r.log else ""),
                      file=sys.stderr, flush=True)
                return status
    return 0


if __name__ == "__main__":
    sys.exit(main())
