"""Jobs that test the plan's runner itself (tests/bench/gpu/test_runner.py): each ``action`` does
what a real job may do to its process, so containment is tested on real processes without SGLang.

* ``ok``: returns its ``args["number"]`` (:class:`SelftestResult`);
* ``sigquit_tree``: kills its own process, as SGLang's SIGQUIT handler kills its engine's process
  tree after a scheduler failed;
* ``hang``: sleeps until killed;
* ``orphan``: starts a process that leaves the child's session (as SGLang's schedulers and Ray's
  daemons do), writes its pid to ``args["pid_file"]``, then sleeps until killed.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass

__all__ = ["SelftestResult", "measure", "render"]


@dataclass
class SelftestResult:
    number: int


def measure(ctx, job) -> SelftestResult:
    a = job.args
    if a["action"] == "sigquit_tree":
        os.kill(os.getpid(), signal.SIGKILL)
    if a["action"] in ("hang", "orphan"):
        if a["action"] == "orphan":
            grand = subprocess.Popen([sys.executable, "-c",
                                      "import os, time; os.setsid(); time.sleep(3600)"])
            tmp = a["pid_file"] + ".tmp"
            with open(tmp, "w") as f:
                f.write(f"{os.getpid()} {grand.pid}")
            os.replace(tmp, a["pid_file"])
        time.sleep(3600)
    return SelftestResult(a["number"])


def render(r: SelftestResult) -> list[str]:
    return [f"number {r.number}"]
