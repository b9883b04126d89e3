"""``python -m soft_spatial.train`` ended by a real signal to its driver: SIGTERM (Slurm at the time
limit or on preemption, ``timeout``, ``kill``) as SIGINT (Ctrl-C): the driver exits 128 + the signal
with one line saying so (no stack dump, no abort), no process of its Ray session is left, the run
directory is unlocked and its last checkpoint is there: the same command is then a no-op.

The run is a second run of the session's ``adaptsoft_run`` command (verl's real trainer on the
CPU, ``train_helpers.ADAPTSOFT_RUN``: 2 adaptsoft steps, one rank), held in its TaskRunner right
after step 2's checkpoint, the last of its budget (``tests/support/barrier.py``, loaded in every
Ray process through ``VERL_USE_EXTERNAL_MODULES``), and signalled there; no sleeping. Held there:
every step's metrics were logged before its checkpoint (verl 0.9.1 saves first: a run ended right
after its last save lost that step's metrics, and its resumed run trained a step past the budget);
the two runs drew the same rollouts and logged the same metrics (a row's noise is a function of
the run's seed and the step: docs/design.md §2.2; the streams themselves:
tests/e2e/test_noise_streams.py); its local Ray listens on 127.0.0.1 only, with the run's own
token (0600, in the run's private Ray directory; nothing in ``~/.ray``: issue 44); the checkpoint
carries the soft settings that trained it. One training start-up for all of it (it was four: a
SIGKILLed run, a signalled one, two runs compared). A resume that trains on:
tests/e2e/test_train_cpu.py's run-life test; a SIGKILLed driver's Ray session reaped:
tests/infra/test_ray_session.py; the handler's life in-process, a SIGTERM a finalizer swallowed:
tests/infra/test_signals.py."""
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

import barrier  # noqa: E402
from eval_helpers import tree  # noqa: E402

from soft_spatial.infra import ray_session  # noqa: E402
from soft_spatial.infra.dirlock import DirLock  # noqa: E402
from soft_spatial.infra.procs import alive, start_time  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SAVED = "verl.trainer.ppo.ray_trainer:RayPPOTrainer._save_checkpoint"


def _descendants(pid: int) -> list:
    import psutil

    try:
        return [(p.pid, start_time(p.pid)) for p in psutil.Process(pid).children(recursive=True)]
    except psutil.Error:
        return []


LOOPBACK = {"127.0.0.1", "::1", "::ffff:127.0.0.1"}


def _listening(pids) -> list:
    """(pid, address, port) of every socket the processes ``pids`` listen on (psutil reads them
    from /proc: this user's processes)."""
    import psutil

    out = []
    for pid in pids:
        try:
            out += [(pid, c.laddr.ip, c.laddr.port) for c in psutil.Process(pid).net_connections(kind="inet")
                    if c.status == psutil.CONN_LISTEN]
        except psutil.Error:
            pass
    return out


def _assert_local_ray_is_private(ray_dir: Path, pids: list, home: Path) -> None:
    import psutil

    sockets = _listening(pids)
    names = {p: psutil.Process(p).name() for p, _, _ in sockets}
    assert {"gcs_server", "raylet"} <= set(names.values()), names  # Ray's servers were seen
    assert all(ip in LOOPBACK for _, ip, _ in sockets), [(names[p], ip, port) for p, ip, port in sockets
                                                         if ip not in LOOPBACK]
    token = ray_dir / "auth_token"
    (gcs,) = [p for p, name in names.items() if name == "gcs_server"]
    env = psutil.Process(gcs).environ()
    assert (env.get("RAY_AUTH_MODE"), env.get("RAY_AUTH_TOKEN_PATH")) == ("token", str(token))
    assert [oct(p.stat().st_mode & 0o777) for p in (token, ray_dir, ray_dir.parent)] == ["0o600", "0o700", "0o700"]
    assert not (home / ".ray").exists()  # Ray's shared default token was neither read nor written


def _gone(procs, within=120.0) -> list:
    """The (pid, start time) of ``procs`` still running once they are gone or ``within`` s passed
    (Ray's workers and the watchdog end asynchronously after the driver: a bound, not a timing)."""
    deadline = time.monotonic() + within
    while True:
        left = [(p, t) for p, t in procs if alive(p) and start_time(p) == t]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.2)


@pytest.mark.slow
# SIGTERM only (a whole training start-up per signal; CI's 30 minutes): SIGINT takes the same way out
# (Terminated is a KeyboardInterrupt), as the prepare, export and evaluation signal tests show
@pytest.mark.parametrize("sig", [signal.SIGTERM], ids=["SIGTERM"])
def test_a_signal_after_the_last_checkpoint_ends_training_cleanly_and_the_rerun_is_a_no_op(
        tiny_qwen3_vl_small, train_data, adaptsoft_run, tmp_path, sig):
    from soft_spatial.infra.cache import cache_root
    from soft_spatial.softthink.settings import SETTINGS_FILE
    from train_helpers import (TrainedRun, adaptsoft_run_args, assert_one_step,
                               assert_same_rollouts_and_metrics, logged_metrics, rollout_dumps,
                               run_train, train_command)

    out = tmp_path / "ckpt"
    gate = tmp_path / "gate"
    home = tmp_path / "home"  # where Ray would keep its default token (~/.ray/auth_token)
    home.mkdir()
    # adaptsoft_run's command (2 steps, one checkpoint: step 2's, where the barrier holds the
    # run; one rank: two ranks' Ray processes are tests/e2e/test_multinode_train.py's)
    overrides, run_env = adaptsoft_run_args(tmp_path)
    env = barrier.arm(gate, SAVED, dict(
        os.environ, HOME=str(home), SOFT_SPATIAL_CACHE=str(cache_root()),
        HF_HUB_OFFLINE="1", RAY_USAGE_STATS_ENABLED="0",
        VERL_PLATFORM="cpu",  # as after any test that selected the CPU platform in this process
        VERL_FILE_LOGGER_PATH=str(tmp_path / "metrics.jsonl"), VERL_USE_EXTERNAL_MODULES="barrier",
        SOFT_SPATIAL_FORWARD_ENV=f"{barrier.DIR_ENV} {barrier.AFTER_ENV}", **run_env))
    log = tmp_path / "train.log"
    with open(log, "w") as f:
        driver = subprocess.Popen(train_command(tiny_qwen3_vl_small, train_data, tmp_path, *overrides),
                                  stdout=f, stderr=subprocess.STDOUT, cwd=ROOT, env=env)
    started = []
    try:
        runner = barrier.wait_reached(gate, driver, within=600, log=log)
        ray_dir = ray_session.runs_root() / f"{driver.pid}-{start_time(driver.pid)}"
        started = _descendants(driver.pid)  # Ray's processes, the watchdog, the TaskRunner
        assert runner in [p for p, _ in started] or runner in ray_session.session_pids(ray_dir)
        assert (out / "latest_checkpointed_iteration.txt").read_text() == "2"
        # each step was logged (and its rollouts dumped) before its checkpoint was written
        held = TrainedRun(tmp_path, logged_metrics(tmp_path), rollout_dumps(tmp_path))
        assert [m["step"] for m in held.metrics] == [1, 2]
        for m in held.metrics:
            assert_one_step(m, "adaptsoft")
        # the same command drew the same rollouts as the session's first run, and logged the
        # same metrics, validation's included (before the noise keys every run drew its own)
        assert_same_rollouts_and_metrics(adaptsoft_run, held)
        _assert_local_ray_is_private(ray_dir, [p for p, _ in started] + ray_session.session_pids(ray_dir), home)
        # the checkpoint carries the settings that trained it; the run keeps their key
        assert (out / "global_step_2" / SETTINGS_FILE).read_bytes() == (out / SETTINGS_FILE).read_bytes()
        assert (out / "soft_settings.key.json").is_file()
        driver.send_signal(sig)
        driver.wait(timeout=300)
        text = log.read_text()
        tail = text[-4000:]
        assert driver.returncode == 128 + sig, tail
        assert f"interrupted by {sig.name}" in text, tail
        for crash in ("Traceback", "Fatal Python error", "Aborted", "core dumped", "*** SIG"):
            assert crash not in text, tail
        left = _gone(started + [(p, start_time(p)) for p in ray_session.session_pids(ray_dir)])
        assert not left, {p: Path(f"/proc/{p}/cmdline").read_bytes()[:80] for p, _ in left}
        assert not ray_dir.exists()
        with DirLock(out, "training run directory"):  # nothing holds the run directory
            pass
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
        for pid, t in started:
            if alive(pid) and start_time(pid) == t:
                os.kill(pid, signal.SIGKILL)
    # the same command again: its budget is spent, so nothing is trained, no Ray is started and
    # nothing moves
    before, files = log.read_text(), tree(out)
    metrics = run_train(tiny_qwen3_vl_small, train_data, tmp_path, *overrides, env=run_env)
    new = log.read_text()[len(before):]
    assert "finished: the latest checkpoint is step 2, trainer.total_training_steps=2" in new
    assert "Ray instance" not in new and "Training Progress" not in new
    assert metrics == held.metrics
    assert tree(out) == files and (out / "latest_checkpointed_iteration.txt").read_text() == "2"
    assert sorted(p.name for p in out.glob("global_step_*")) == ["global_step_2"]
