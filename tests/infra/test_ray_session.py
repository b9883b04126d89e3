"""A local Ray session never outlives its driver (soft_spatial/infra/ray_session.py), on real
processes: the watchdog ends a SIGKILLed driver's session (stand-ins for Ray's processes, found
by their command line, their environment or the logs they hold open in the run's Ray directory);
the session's processes are the run's alone and never its driver; the reaper (run at the next
training start) ends the sessions whose driver is gone, a real Ray's renamed agents included
(slow). The process table is asserted, never a time. (The Ray directory being this user's alone,
and training refusing one that is not: tests/test_train.py; a real training run's Ray ended by a
signal: tests/e2e/test_train_signals.py.)"""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from soft_spatial.infra import ray_session

ROOT = Path(__file__).resolve().parents[2]


DRIVER = r"""
import os, subprocess, sys, time
from soft_spatial.infra import ray_session
path = ray_session.run_ray_dir()
ray_session.start_watchdog(path)
# stand-ins for Ray's processes, each in its own session (so it survives the driver): one with
# the run dir on its command line (GCS, raylet), one with it only in its inherited RAY_TMPDIR,
# one with only its log open there (the agents and workers rename themselves,
# "ray::DashboardAgent", and Ray's setproctitle wipes their command line and environment)
SLEEP = "import sys, time; print(file=sys.stderr, flush=True); time.sleep(600)"  # exec'd, waits
agent = subprocess.Popen([sys.executable, "-c", SLEEP, str(path)], start_new_session=True,
                         stderr=subprocess.PIPE)
by_env = subprocess.Popen([sys.executable, "-c", SLEEP], start_new_session=True,
                          stderr=subprocess.PIPE, env=dict(os.environ, RAY_TMPDIR=str(path)))
renamed = subprocess.Popen([sys.executable, "-c", SLEEP], start_new_session=True,
                           stderr=subprocess.PIPE, stdout=open(path / "agent.out", "w"))
for p in (agent, by_env, renamed):
    p.stderr.readline()
print(path, agent.pid, by_env.pid, renamed.pid, flush=True)
time.sleep(600)
"""


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def wait_gone(pid, within=60.0):
    """True once ``pid`` is gone (a state check with a generous bound, not a timing assertion)."""
    deadline = time.monotonic() + within
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    return not alive(pid)


def test_the_watchdog_kills_the_session_of_a_killed_driver(tmp_path):
    driver = subprocess.Popen([sys.executable, "-c", DRIVER], stdout=subprocess.PIPE, text=True,
                              cwd=ROOT)
    path, *agents = driver.stdout.readline().split()
    agents = [int(a) for a in agents]
    try:
        assert all(alive(a) for a in agents)
        assert set(agents) <= set(ray_session.session_pids(Path(path)))
        driver.send_signal(signal.SIGKILL)
        driver.wait()
        for agent in agents:
            assert wait_gone(agent), f"agent {agent} of {path} outlived its driver"
        assert _dir_removed_eventually(Path(path))
    finally:
        for agent in agents:
            if alive(agent):
                os.kill(agent, signal.SIGKILL)


def _dir_removed_eventually(path, within=30.0):
    deadline = time.monotonic() + within
    while path.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    return not path.exists()


def test_session_pids_do_not_mix_up_runs_whose_names_share_a_prefix(tmp_path):
    path = tmp_path / "123-456"
    sleep = "print(flush=True); import time; time.sleep(600)"
    other = subprocess.Popen([sys.executable, "-c", sleep, f"{path}7/ray"], stdout=subprocess.PIPE,
                             env=dict(os.environ, RAY_TMPDIR=f"{path}7"))
    mine = subprocess.Popen([sys.executable, "-c", sleep, f"{path}/ray"], stdout=subprocess.PIPE)
    (tmp_path / "123-4567").mkdir()
    other_log = subprocess.Popen([sys.executable, "-c", sleep], stdout=subprocess.PIPE,
                                 stderr=open(tmp_path / "123-4567" / "log", "w"))
    try:
        for p in (other, mine, other_log):
            p.stdout.readline()  # started
        assert ray_session.session_pids(path) == [mine.pid]
    finally:
        for p in (other, mine, other_log):
            p.kill()
            p.wait()


def test_session_pids_never_list_the_driver_that_owns_the_directory(tmp_path, monkeypatch):
    """The driver holds Ray's driver logs open below its directory, and its watchdog fires while
    the driver is still exiting: it must not SIGKILL its own driver (a finished run exited -9)."""
    monkeypatch.setattr(ray_session, "runs_root", lambda: tmp_path)
    hold = ("import sys, time; f = open(sys.argv[1], 'w'); print(flush=True); time.sleep(600)")
    # this test's process is the driver: its directory, a log file it holds open, one agent
    path = ray_session.run_ray_dir(os.getpid())
    log = open(path / "driver.log", "w")
    agent = subprocess.Popen([sys.executable, "-c", hold, str(path / "agent.log")],
                             stdout=subprocess.PIPE)
    try:
        agent.stdout.readline()  # started, its log open
        assert ray_session.session_pids(path) == [agent.pid]
        # seen from another process (the watchdog), this process is still not listed
        out = subprocess.run([sys.executable, "-c", "import sys; from pathlib import Path; "
                              "from soft_spatial.infra import ray_session; "
                              "print(ray_session.session_pids(Path(sys.argv[1])))", str(path)],
                             capture_output=True, text=True, cwd=ROOT, check=True)
        assert out.stdout.strip() == str([agent.pid])
    finally:
        log.close()
        agent.kill()
        agent.wait()


RAY_DRIVER = r"""
import os, time
import ray
from soft_spatial.infra import ray_session
path = ray_session.run_ray_dir()
os.environ[ray_session.RAY_TMPDIR] = str(path)  # as soft_spatial.train does
watchdog = ray_session.start_watchdog(path)
ray.init(num_cpus=1, include_dashboard=False)


@ray.remote
def pid():
    return os.getpid()


worker = ray.get(pid.remote())
print(path, watchdog.pid, worker, flush=True)
time.sleep(600)
"""


def _children():
    tree = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError):
                continue
            tree.setdefault(ppid, []).append(int(entry.name))
    return tree


def _descendants(pid):
    tree, out, todo = _children(), [], [pid]
    while todo:
        for child in tree.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


@pytest.mark.slow
def test_the_reaper_leaves_no_process_of_a_sigkilled_drivers_real_ray_session():
    """A driver starts a real local Ray and is SIGKILLed with its watchdog; the reaper (run at
    the next training start) must end every process the driver had started, the agents that
    renamed themselves included (they have no trace of the run on their command line)."""
    from soft_spatial.infra.procs import start_time
    driver = subprocess.Popen([sys.executable, "-c", RAY_DRIVER], stdout=subprocess.PIPE, text=True,
                              cwd=ROOT, env=dict(os.environ, RAY_USAGE_STATS_ENABLED="0"))
    started = []
    try:
        path, watchdog, worker = driver.stdout.readline().split()
        path, watchdog = Path(path), int(watchdog)
        started = [(p, start_time(p)) for p in _descendants(driver.pid) if p != watchdog]
        titles = {p: Path(f"/proc/{p}/cmdline").read_bytes() for p, _ in started}
        renamed = [p for p, t in titles.items()
                   if t.startswith(b"ray::") and b"Agent" in t and str(path).encode() not in t]
        assert renamed and int(worker) in titles  # the agents, renamed; a worker
        os.kill(watchdog, signal.SIGKILL)  # the watchdog died too (e.g. killed with the group)
        driver.kill()
        driver.wait()
        killed = ray_session.reap_orphans()
        left = [p for p, t in started if alive(p) and start_time(p) == t]
        assert not left, {p: titles[p][:60] for p in left}
        assert set(renamed) <= set(killed) and not path.exists()
    finally:
        driver.kill()
        for p, t in started:
            if alive(p) and start_time(p) == t:
                os.kill(p, signal.SIGKILL)


def test_reap_orphans_kills_sessions_whose_driver_is_gone(tmp_path):
    root = tmp_path / "ssray"
    orphan = root / "999999999-12345"  # no such driver
    live = ray_session.run_ray_dir()  # this process: alive
    mine = root / live.name
    mine.mkdir(parents=True)
    orphan.mkdir(parents=True)
    procs = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", str(d)])
             for d in (orphan, mine)]
    try:
        killed = ray_session.reap_orphans(root)
        procs[0].wait(timeout=30)
        assert killed == [procs[0].pid] and not orphan.exists()
        assert procs[1].poll() is None and mine.exists()  # a live driver's session is kept
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        ray_session.kill_session(live)
