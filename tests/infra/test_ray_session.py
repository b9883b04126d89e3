"""A training run's local Ray never outlives its driver, and ending it never ends another process
(soft_spatial/infra/ray_session.py), on real processes: the reaper run at the next training start
ends the Ray of a driver whose watchdog died too (stand-ins in the recorded session and with the
recorded marker) and nothing that only names the run's directory, carries it as ``RAY_TMPDIR`` or
holds a file open in it. The process table is asserted, never a time. (The Ray directory being
this user's alone, and training refusing one that is not: tests/test_train.py; a real training
run's local Ray, its renamed agents included, ended by SIGHUP while a user's ``tail -f`` on its
log lives on: tests/e2e/test_lifetime.py; by SIGTERM after a whole step:
tests/e2e/test_train_signals.py; the watchdog after a SIGKILL: tests/infra/test_tether.py.)"""
import json
import os
import subprocess
import sys

import pytest

from soft_spatial.infra import ray_session, tether
from soft_spatial.infra.procs import alive

# a head stand-in: leads a session, carries the marker, and starts a process in its session with
# an empty environment (as Ray's agents, whose setproctitle wipes it); prints both pids
HEAD = ("import subprocess, sys, time; p = subprocess.Popen([sys.executable, '-c', "
        "'import time; time.sleep(600)'], env={}); print(p.pid, flush=True); time.sleep(600)")
SLEEP = "import time; print(flush=True); time.sleep(600)"


def test_the_reaper_ends_a_dead_drivers_ray_and_never_a_process_that_only_holds_its_logs(tmp_path):
    """Issue 55 item 9: when a training ended, its Ray watchdog SIGKILLed every process that named
    or held a file in the run's Ray directory (a user's ``tail -f`` or ``less`` on its logs). Now
    the reaper ends what the run's tether recorded (its head's session and marker), the directory
    is removed, and the user's processes live on; a live driver's directory is kept."""
    root = tmp_path / "ssray"
    orphan = root / "999999999-12345"  # no such driver
    orphan.mkdir(parents=True)
    (orphan / "session_x" / "logs").mkdir(parents=True)
    log = orphan / "session_x" / "logs" / "raylet.out"
    log.write_text("a log line\n")
    head = tether.start([sys.executable, "-c", HEAD], marker="run-orphan", watch=False,
                        stdout=subprocess.PIPE)
    agent = int(head.proc.stdout.readline())
    (orphan / ray_session.RECORD).write_text(json.dumps({"marker": "run-orphan", "pid": head.pid}))
    users = [subprocess.Popen(["tail", "-f", str(log)], stdout=subprocess.DEVNULL),
             subprocess.Popen([sys.executable, "-c", SLEEP, str(orphan)], stdout=subprocess.PIPE,
                              env=dict(os.environ, RAY_TMPDIR=str(orphan)))]
    live = ray_session.run_ray_dir()  # this process's: alive
    mine = root / live.name
    mine.mkdir()
    try:
        users[1].stdout.readline()  # started
        assert set(ray_session.session_pids(orphan)) == {head.pid, agent}
        killed = ray_session.reap_orphans(root)
        head.wait(timeout=60)
        assert sorted(killed) == sorted([head.pid, agent]) and not alive(agent)
        assert not orphan.exists() and mine.exists()  # a live driver's directory is kept
        assert all(u.poll() is None for u in users)  # the user's processes live on
    finally:
        tether.reap("run-orphan", [head.pid], grace_s=0.0)
        for u in users:
            u.kill()
            u.wait()
        live.rmdir()


def test_a_head_started_without_waiting_reports_its_failure_when_waited_for(tmp_path):
    """``start_local(wait=False)`` returns while the head starts (training imports verl
    meanwhile); `LocalRay.wait_up` then raises for a head that exited first, with its log's end,
    and `LocalRay.stop` leaves nothing of it."""
    from soft_spatial.infra.ray_session import private_dir, start_local

    path = private_dir(tmp_path / "ray")
    local = start_local(path, {"num_cpus": "not a number"}, wait=False)
    assert local.address == ""
    try:
        with pytest.raises(RuntimeError, match="did not start"):
            local.wait_up()
    finally:
        local.stop()
    assert not path.exists()
