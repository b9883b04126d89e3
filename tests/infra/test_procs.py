"""soft_spatial.infra.procs against processes this test starts and ends."""
import os
import subprocess
import sys
import uuid

from soft_spatial.infra.procs import alive, find_pids, open_paths, start_time


def test_state_start_time_and_scan_follow_a_child_through_its_life():
    tag = f"procs-test-{uuid.uuid4().hex}"
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()", tag],
                             stdin=subprocess.PIPE, env=dict(os.environ, PROCS_TEST=tag))
    try:
        assert alive(child.pid) and alive(os.getpid())
        # the start time is the process's, fixed for its life, and differs from ours
        assert start_time(child.pid) == start_time(child.pid) != start_time(os.getpid())
        assert float(start_time(child.pid)) >= float(start_time(os.getpid()))
        assert find_pids(cmdline=lambda args: tag in args, same_user=True) == [child.pid]
        assert find_pids(environ=lambda env: env.get("PROCS_TEST") == tag) == [child.pid]
        # either test matches; without one every process matches, never this one
        assert find_pids(cmdline=lambda args: False, environ=lambda env: env.get("PROCS_TEST") == tag) == [child.pid]
        assert child.pid in find_pids() and os.getpid() not in find_pids()
        child.stdin.close()
        child.wait(timeout=60)  # exited and reaped
    finally:
        child.kill()
    assert not alive(child.pid) and start_time(child.pid) is None


def test_a_zombie_is_not_alive():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)  # exited, not yet reaped
    try:
        assert start_time(child.pid) is not None and not alive(child.pid)  # still a process, exited
    finally:
        child.wait()


def test_open_paths_lists_a_childs_open_files_and_nothing_once_it_exited(tmp_path):
    log = tmp_path / "child.log"
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                             stdin=subprocess.PIPE, stdout=open(log, "w"))
    try:
        assert str(log) in open_paths(child.pid)
        child.stdin.close()
        child.wait(timeout=60)
    finally:
        child.kill()
    assert open_paths(child.pid) == []
