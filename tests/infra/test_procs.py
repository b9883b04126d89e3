"""soft_spatial.infra.procs against processes this test starts and ends."""
import os
import subprocess
import sys
import uuid

from soft_spatial.infra.procs import alive, find_pids, start_time


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


def test_a_session_lists_its_members_and_no_other_process():
    """A child in a session of its own and the process it starts there (a member, whatever its
    command line or environment) are the session's; this process and its own session are not."""
    script = ("import subprocess, sys; p = subprocess.Popen([sys.executable, '-c', "
              "'import sys; sys.stdin.read()'], env={}); print(p.pid, flush=True); sys.stdin.read()")
    leader = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        member = int(leader.stdout.readline())
        assert find_pids(sessions={leader.pid}, same_user=True) == sorted([leader.pid, member])
        assert os.getpid() not in find_pids(sessions={os.getsid(0)})
    finally:
        leader.stdin.close()
        leader.kill()
        leader.wait()  # the member reads the end of the same stdin and exits too
