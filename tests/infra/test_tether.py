"""infra/tether.py: a tethered child and everything it starts end with its parent, however the
parent ends. Real processes; every wait is for a state (a file written, a process gone), never for
a time."""
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

# the child: starts a grandchild that leaves the child's session (as SGLang's schedulers and Ray's
# daemons do), writes both pids, and sleeps
CHILD = textwrap.dedent("""
    import os, subprocess, sys, time
    grand = subprocess.Popen([sys.executable, "-c",
                              "import os, time; os.setsid(); time.sleep(600)"])
    with open(sys.argv[1] + ".tmp", "w") as f:
        f.write(f"{os.getpid()} {grand.pid}")
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
    try:
        wait_for(lambda: pids_file.exists() and facts_file.exists(), "the child started")
        child_pid, grand_pid = map(int, pids_file.read_text().split())
        facts = json.loads(facts_file.read_text())
        assert alive(child_pid) and alive(grand_pid)
        assert set(tether.marked_pids(facts["marker"])) == {child_pid, grand_pid}
        parent.send_signal(sig)
        parent.wait(timeout=120)  # bounds a failure only
        wait_for(lambda: not alive(facts["watchdog"]), "the watchdog finished")
        assert not alive(child_pid) and not alive(grand_pid)
        assert tether.marked_pids(facts["marker"]) == []
    finally:
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
