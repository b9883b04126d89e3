"""A learning stage's child process: its command run tethered with its output in a log, and its
progress echoed while it runs (the learning runner's stages, `lab/learning/experiment.py`)."""
from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from soft_spatial.infra import tether

__all__ = ["StageFailed", "run_logged", "follow_log", "follow_metrics"]


class StageFailed(RuntimeError):
    """A stage's command failed; the message holds the end of its log."""


def run_logged(logs: Path, name: str, cmd: Sequence, env: dict, cwd: Path,
               follow: Callable[[tether.Tethered], None] | None = None) -> None:
    """Run a stage's command, tethered to this process (`infra.tether`: it and whatever it starts
    end with this process however it ends), its output appended to ``logs/<name>.log``
    (``follow(child)`` watches it meanwhile). Raise `StageFailed` with the log's tail."""
    logs.mkdir(parents=True, exist_ok=True)
    log = logs / f"{name}.log"
    with log.open("a") as f:
        f.write(f"\n$ {' '.join(map(str, cmd))}\n")
        f.flush()
        child = tether.start(list(map(str, cmd)), stdout=f, stderr=subprocess.STDOUT, env=env,
                             cwd=cwd)
        try:
            if follow is not None:
                follow(child)
            child.wait()
        finally:  # what is left of it (Ray's workers, a killed command's children) ends here
            tether.stop(child)
    if child.returncode != 0:
        raise StageFailed(f"{name} failed (exit {child.returncode}); log {log}:\n{tether.log_tail(log)}")


def follow_log(say: Callable[[str], None], child, logs: Sequence[Path], prefix: str) -> None:
    """``say`` the lines of ``logs`` (in order) that start with ``prefix`` while ``child`` runs."""
    pos = {log: log.stat().st_size if log.is_file() else 0 for log in logs}
    while True:
        done = child.poll() is not None
        for log in logs:
            if not log.is_file():
                continue
            with log.open("rb") as f:
                f.seek(pos[log])
                chunk = f.read()
            cut = chunk.rfind(b"\n") + 1  # whole lines only
            pos[log] += cut
            for line in chunk[:cut].decode(errors="replace").splitlines():
                if line.startswith(prefix):
                    say("  " + line)
        if done:
            return
        time.sleep(2)


def follow_metrics(say: Callable[[str], None], child, metrics: Path, mode: str, steps: int) -> None:
    """``say`` one line per finished training step (verl's ``metrics.jsonl``) while ``child``
    runs."""
    from soft_spatial.lab.learning.report import read_metrics

    seen, last = set(), time.time()
    while True:
        done = child.poll() is not None
        for m in read_metrics(metrics):
            if m["step"] in seen:
                continue
            seen.add(m["step"])
            now = time.time()
            tau = (f"  tau {m['soft/tau_min']:.2f}..{m['soft/tau_max']:.2f}"
                   if "soft/tau_min" in m else "")
            say(f"  {mode} step {m['step']}/{steps}: reward "
                f"{m.get('critic/score/mean', float('nan')):.3f}, acc "
                f"{m.get('reward/acc_mean', float('nan')):.3f}{tau} ({now - last:.0f} s)")
            last = now
        if done:
            return
        time.sleep(2)
