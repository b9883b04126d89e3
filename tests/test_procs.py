"""soft_spatial.infra.procs against processes this test starts and ends."""
import os
import subprocess
import sys
import uuid

from soft_spatial.infra.procs import alive, find_pids, open_paths, start_time, stat_fields


def test_state_start_time_and_scan_follow_a_child_through_its_life():
    tag = f"procs-test-{uuid.uuid4().hex}"
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()", tag],
                             stdin=subprocess.PIPE, env=dict(os.environ, PROCS_TEST=tag))
    try:
        assert alive(child.pid) and alive(os.getpid())
        # the start time is the process's, fixed for its life, and differs from ours
        assert start_time(child.pid) == start_time(child.pid) != start_time(os.getpid())
        assert int(start_time(child.pid)) >= int(start_time(os.getpid()))
        assert find_pids("cmdline", lambda b: tag.encode() in b, same_user=True) == [child.pid]
        marker = f"PROCS_TEST={tag}".encode()
        assert find_pids("environ", lambda b: marker in b.split(b"\0")) == [child.pid]
        # this process is never listed, even when it matches
        assert os.getpid() not in find_pids("stat", lambda b: True)
        child.stdin.close()
        child.wait(timeout=60)  # exited and reaped
    finally:
        child.kill()
    assert not alive(child.pid) and stat_fields(child.pid) is None and start_time(child.pid) is None


def test_a_zombie_is_not_alive():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)  # exited, not yet reaped
    try:
        assert stat_fields(child.pid)[0] == "Z" and not alive(child.pid)
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
