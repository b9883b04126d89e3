"""Every command that starts a child ends it with itself (issue 55: one lifetime mechanism,
``soft_spatial/infra/tether.py``, under ``soft_spatial/infra/signals.py``'s ``command``): SIGTERM,
SIGINT and SIGHUP to the command leave no process of the run (its child, a process the child
started that left its session, one that stayed in it with an empty environment), the command
exits 128 + the signal with one line, and no scratch folder, partial output or lock is left.

Each command runs its own ``main`` with the cheapest child it starts replaced by a stand-in
(``tests/support/lifetime.py``); training's child is its real local Ray, held once the driver
joined it (``tests/support/barrier.py``; slow, SIGHUP: SIGTERM is
tests/e2e/test_train_signals.py's). The process table is polled until the processes are gone,
never a time asserted. Elsewhere: the launcher (tests/launch/test_cluster.py), the learning runner
(tests/lab/learning/test_experiment.py), the GPU kit's plan (tests/bench/gpu/test_runner.py),
SIGKILL (tests/infra/test_tether.py, tests/infra/test_ray_session.py)."""
from __future__ import annotations

import json
import signal
import subprocess

import pytest

import barrier
import lifetime
from eval_helpers import tree

from soft_spatial.infra.dirlock import DirLock

SIGNALS = pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP],
                                  ids=["SIGTERM", "SIGINT", "SIGHUP"])


@SIGNALS
def test_export_ends_its_merger_and_leaves_no_partial_output(tmp_path, sig):
    """Issue 55 item 8: SIGHUP to export orphaned the merger and left ``OUT.partial`` (SIGTERM
    was handled). While the first export is in its merger, a second one to the same output is
    refused at once naming it, and changes nothing (SIGTERM's run: one is enough)."""
    actor = tmp_path / "ckpt" / "global_step_1" / "actor"
    actor.mkdir(parents=True)
    (actor / "model_world_size_1_rank_0.pt").write_bytes(b"never read: the merger is a stand-in")
    (tmp_path / "ckpt" / "latest_checkpointed_iteration.txt").write_text("1")
    out, pids = tmp_path / "export", tmp_path / "pids"

    def second_export(first):
        assert (tmp_path / "export.partial" / "config.json").is_file()  # the merger's output
        before = tree(tmp_path)
        second = subprocess.run(lifetime.command("export", tmp_path / "pids2", tmp_path / "ckpt", out),
                                capture_output=True, text=True, timeout=300, env=lifetime.env())
        assert second.returncode != 0 and "Traceback" not in second.stderr
        assert f"pid {first.pid}" in second.stderr and "in use" in second.stderr, second.stderr
        assert tree(tmp_path) == before  # the first's OUT.partial untouched, no OUT

    lifetime.signal_run(lifetime.command("export", pids, tmp_path / "ckpt", out), pids, sig,
                        held=second_export if sig == signal.SIGTERM else None)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt", "pids"]  # no OUT.partial, no lock


@SIGNALS
def test_the_ablation_sweep_ends_its_training_and_releases_the_run_directory(tmp_path, sig,
                                                                              tiny_qwen3_vl_small):
    """Issue 55 item 6: SIGTERM to the sweep left its ``soft_spatial.train`` child running,
    holding the run directory's lock (a plain ``subprocess.run``, no tether)."""
    config = tmp_path / "sweep.yaml"
    config.write_text("benchmark: omnispatial\ntask_types: [Perspective_Taking]\n"
                      "columns: [Egocentric]\nrows:\n  - {key: a, name: A, experiment: soft_fixed}\n")
    out, pids = tmp_path / "t4", tmp_path / "pids"
    data = [tmp_path / f"{split}.parquet" for split in ("train", "test")]
    for f in data:  # the training key digests them; the stub training never reads them
        f.write_bytes(b"rows")
    lifetime.signal_run(lifetime.command(
        "ablation", pids, "--out", out, "--config", config, "--override", "model=tiny",
        "--override", f"model.path={tiny_qwen3_vl_small}",
        "--train-override", f"data.train_files={data[0]}",
        "--train-override", f"data.val_files={data[1]}"), pids, sig)
    with DirLock(out / "a" / "train", "training run directory"):  # nothing holds it
        pass
    assert not (out / "a" / "train.done").exists()


@SIGNALS
def test_the_gpu_kit_ends_its_jobs_and_removes_its_scratch_folder(tmp_path, sig):
    """Issue 55 item 7: SIGTERM to the kit's stage c (``timeout`` sends it) left its
    ``actor_update`` child running and its ``gpukit-*`` scratch folder in TMPDIR. The stages are
    the plan's jobs now: the plan's child and what it started end, the job is recorded as killed."""
    scratch, pids, out = tmp_path / "tmp", tmp_path / "pids", tmp_path / "out"
    scratch.mkdir()
    lifetime.signal_run(lifetime.command("kit", pids, "--only", "T/orphan", "--dry-run", "--out",
                                         out), pids, sig, lifetime.env(TMPDIR=str(scratch)))
    assert list(scratch.glob("gpukit-*")) == []  # (torch's own cache folder may be there)
    records = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    assert [r["status"] for r in records if r.get("job") in ("orphan", "end")][-2:] == ["killed",
                                                                                         "killed"]


@pytest.mark.slow
# SIGHUP only (a training start-up per signal): SIGTERM after a whole step and its checkpoint is
# tests/e2e/test_train_signals.py's, and SIGINT takes SIGTERM's way out (both a KeyboardInterrupt;
# only the status differs: tests/infra/test_signals.py), as every command above shows
@pytest.mark.parametrize("sig", [signal.SIGHUP], ids=["SIGHUP"])
def test_training_ends_its_local_ray(tiny_qwen3_vl_small, train_data, tmp_path, sig):
    """Training held once its driver joined its local Ray (the head tethered to the driver, every
    Ray process in the head's session or carrying its marker), then signalled: no Ray process is
    left, the renamed agents included, the run's Ray directory is gone and the run directory
    unlocked, and a user's ``tail -f`` on a Ray log lives on (issue 55 item 9: the Ray watchdog
    SIGKILLed every process naming or holding a file there). (SIGTERM, after a whole step and its
    checkpoint: tests/e2e/test_train_signals.py.)"""
    from train_helpers import train_command

    from soft_spatial.infra import ray_session
    from soft_spatial.infra.procs import start_time

    gate, log = tmp_path / "gate", tmp_path / "train.log"
    # held once the driver joined its local Ray (verl loads the barrier with the plugin)
    env = barrier.arm(gate, "ray:init", lifetime.env(
        HF_HUB_OFFLINE="1", RAY_USAGE_STATS_ENABLED="0", VERL_USE_EXTERNAL_MODULES="barrier"))
    with open(log, "w") as f:
        driver = subprocess.Popen(train_command(tiny_qwen3_vl_small, train_data, tmp_path),
                                  stdout=f, stderr=subprocess.STDOUT, cwd=lifetime.ROOT, env=env,
                                  start_new_session=True, preexec_fn=barrier.hangup_default)
    ray, tail = [], None
    try:
        assert barrier.wait_reached(gate, driver, within=600, log=log) == driver.pid
        ray_dir = ray_session.runs_root() / f"{driver.pid}-{start_time(driver.pid)}"
        ray = ray_session.session_pids(ray_dir)
        names = {p: lifetime.comm(p) for p in ray}
        assert {"gcs_server", "raylet"} <= set(names.values()) and driver.pid not in ray
        # Ray's agents renamed themselves: no trace of the run on their command line or in their
        # environment; they are the run's by their session
        renamed = [p for p in ray if lifetime.cmdline(p).startswith(b"ray::") and b"Agent" in
                   lifetime.cmdline(p) and str(ray_dir).encode() not in lifetime.cmdline(p)]
        assert renamed, names
        tail = subprocess.Popen(["tail", "-f", str(next(ray_dir.rglob("raylet.out")))],
                                stdout=subprocess.DEVNULL)  # a user reading a Ray log
        driver.send_signal(sig)
        driver.wait(timeout=300)
        text = log.read_text()
        assert driver.returncode == 128 + sig, text[-3000:]
        assert f"interrupted by {signal.Signals(sig).name}" in text and "Traceback" not in text, text[-3000:]
        barrier.wait_for(lambda: not any(map(lifetime.alive, ray)), "every Ray process gone",
                         limit_s=60.0)
        assert not ray_dir.exists() and tail.poll() is None  # the user's tail -f lives on
        with DirLock(tmp_path / "ckpt", "training run directory"):  # nothing holds it
            pass
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
        lifetime.kill(ray + ([tail.pid] if tail else []))
