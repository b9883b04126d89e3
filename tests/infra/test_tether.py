"""infra/tether.py: a tethered child and everything it starts end with its parent, however the
parent ends; what the reaper ends is the child's session and the processes carrying its marker,
never a process that only names the child's files or holds them open. Real processes; every wait
is for a state (a file written, a process gone), never for a time."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from barrier import hangup_default, wait_for

from soft_spatial.infra import tether
from soft_spatial.infra.procs import alive

# the child: starts a grandchild that leaves the child's session (as SGLang's schedulers do: it
# keeps the marker) and one that stays in it with an empty environment (as Ray's agents, whose
# setproctitle wipes their environment), writes the three pids, and sleeps
CHILD = textwrap.dedent("""
    import os, subprocess, sys, time
    grand = subprocess.Popen([sys.executable, "-c",
                              "import os, time; os.setsid(); time.sleep(600)"])
    wiped = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], env={})
    with open(sys.argv[1] + ".tmp", "w") as f:
        f.write(f"{os.getpid()} {grand.pid} {wiped.pid}")
    os.replace(sys.argv[1] + ".tmp", sys.argv[1])
    time.sleep(600)
""")

# the parent: tethers the child, writes its own facts, and waits to be killed
PARENT = textwrap.dedent("""
    import json, os, sys, time
    from soft_spatial.infra import tether
    child = tether.start([sys.executable, "-c", sys.argv[1], sys.argv[2]], grace_s=2.0)
    with open(sys.argv[3] + ".tmp", "w") as f:
        json.dump({"watchdog": child.watchdog.pid, "marker": child.marker}, f)
    os.replace(sys.argv[3] + ".tmp", sys.argv[3])
    time.sleep(600)
""")


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGHUP, signal.SIGTERM])
def test_everything_the_child_started_ends_with_its_killed_parent(tmp_path, sig):
    pids_file, facts_file = tmp_path / "pids", tmp_path / "facts.json"
    parent = subprocess.Popen([sys.executable, "-c", PARENT, CHILD, str(pids_file), str(facts_file)],
                              start_new_session=True, preexec_fn=hangup_default)
    foreign = []
    try:
        wait_for(lambda: pids_file.exists() and facts_file.exists(), "the child started")
        child_pid, grand_pid, wiped_pid = map(int, pids_file.read_text().split())
        facts = json.loads(facts_file.read_text())
        assert all(map(alive, (child_pid, grand_pid, wiped_pid)))
        assert set(tether.marked_pids(facts["marker"])) == {child_pid, grand_pid}  # not the wiped one
        assert set(tether.members(facts["marker"], [child_pid])) == {child_pid, grand_pid, wiped_pid}
        # a user's tail -f on the child's file, and a process naming its marker and file: not its
        foreign = [subprocess.Popen(["tail", "-f", str(pids_file)], stdout=subprocess.DEVNULL),
                   subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)",
                                     facts["marker"], str(pids_file)])]
        parent.send_signal(sig)
        parent.wait(timeout=120)  # bounds a failure only
        wait_for(lambda: not alive(facts["watchdog"]), "the watchdog finished")
        assert not any(map(alive, (child_pid, grand_pid, wiped_pid)))
        assert tether.members(facts["marker"], [child_pid]) == []
        assert all(p.poll() is None for p in foreign)
    finally:
        for p in foreign:
            p.kill()
            p.wait()
        if parent.poll() is None:
            os.killpg(parent.pid, signal.SIGKILL)
            parent.wait()


def test_stop_ends_the_leftovers_of_a_finished_child_before_it_returns(tmp_path):
    script = ("import subprocess, sys; subprocess.Popen([sys.executable, '-c', "
              "'import os, time; os.setsid(); time.sleep(600)']); print('started', flush=True)")
    child = tether.start([sys.executable, "-c", script], grace_s=2.0, stdout=subprocess.PIPE)
    assert child.proc.stdout.readline() == b"started\n"
    assert child.wait() == 0
    left = tether.marked_pids(child.marker)
    assert len(left) == 1 and alive(left[0])  # the grandchild outlived the child
    assert tether.stop(child) == 0
    assert not alive(left[0]) and tether.marked_pids(child.marker) == []
    assert child.watchdog.returncode == 0


def test_the_marker_is_this_tethers_own(tmp_path):
    one = tether.start([sys.executable, "-c", "import time; time.sleep(600)"], grace_s=1.0)
    two = tether.start([sys.executable, "-c", "import time; time.sleep(600)"], grace_s=1.0)
    try:
        assert one.marker != two.marker
        assert tether.marked_pids(one.marker) == [one.pid]
        assert os.environ.get(tether.MARKER_VAR) is None  # the parent carries no marker
        tether.stop(one)
        assert not alive(one.pid) and alive(two.pid)  # stopping one leaves the other
    finally:
        tether.stop(two)
    assert not alive(two.pid)


def test_stop_returns_once_a_child_that_ends_on_sigterm_is_gone():
    """A child ended by the watchdog's SIGTERM is a zombie until `stop` reaps it, after the
    watchdog is done: the watchdog does not count it as running (it did, and every stop of a
    running child waited out the grace period before its SIGKILL)."""
    import threading

    child = tether.start([sys.executable, "-c", "import time; time.sleep(600)"], grace_s=3600.0)
    stopper = threading.Thread(target=tether.stop, args=(child,), daemon=True)
    stopper.start()
    try:
        wait_for(lambda: not stopper.is_alive(), "stop returned", limit_s=120.0)
    finally:
        for proc in (child.proc, child.watchdog):
            if proc.poll() is None:
                proc.kill()
    assert child.returncode == -signal.SIGTERM and not alive(child.pid)


def test_a_child_started_without_a_watchdog_outlives_its_parent_until_reaped():
    """The launcher's ``head``/``worker``: Ray in the background, ended later by ``stop`` with the
    tether's reaper (the run's marker and the recorded pid)."""
    script = ("import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', "
              "'import time; time.sleep(600)'], env={}); print('started', flush=True); time.sleep(600)")
    parent = subprocess.run(
        [sys.executable, "-c", "import subprocess, sys; from soft_spatial.infra import tether; "
         "c = tether.start([sys.executable, '-c', sys.argv[1]], marker='run-x', watch=False, "
         "stdout=subprocess.PIPE, stderr=subprocess.DEVNULL); "
         "print(c.pid, c.proc.stdout.readline().decode().strip())", script],
        capture_output=True, text=True, timeout=120, check=True)
    pid, said = parent.stdout.split()
    pid = int(pid)
    try:
        assert said == "started" and alive(pid)
        left = tether.members("run-x", [pid])
        assert len(left) == 2 and pid in left  # the child and its grandchild, wiped environment
        tether.reap("run-x", [pid], grace_s=5.0)
        assert tether.members("run-x", [pid]) == [] and not any(map(alive, left))
    finally:
        tether.reap("run-x", [pid], grace_s=0.0)


def test_a_child_tethered_inside_a_tethered_child_carries_both_markers():
    """An outer tether's reaper ends what an inner one started too (a training run's local Ray,
    under the learning runner or the ablation)."""
    inner_script = ("import subprocess, sys; from soft_spatial.infra import tether; "
                    "c = tether.start([sys.executable, '-c', 'import time; time.sleep(600)']); "
                    "print(c.pid, c.marker, flush=True); sys.stdin.read()")
    outer = tether.start([sys.executable, "-c", inner_script], grace_s=2.0,
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        pid, inner = outer.proc.stdout.readline().split()
        pid = int(pid)
        assert set(tether.marked_pids(outer.marker)) == {outer.pid, pid}
        assert tether.marked_pids(inner.decode()) == [pid]
    finally:
        tether.stop(outer)
    assert not alive(pid) and not alive(outer.pid)


def test_a_logs_tail_is_its_last_whole_lines_and_nothing_without_it(tmp_path):
    log = tmp_path / "child.log"
    assert tether.log_tail(log) == ""
    log.write_bytes(b"".join(b"line %d\n" % i for i in range(40)) + b"last, no newline \xff")
    assert tether.log_tail(log) == "".join(f"line {i}\n" for i in range(11, 40)) + "last, no newline \ufffd"
    assert tether.log_tail(log, 2) == "line 39\nlast, no newline \ufffd"
