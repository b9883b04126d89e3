"""The training entry point around verl: checks before Ray starts, the run directory (lock, metrics
kept across resumes, Hydra's files), and the local Ray session that never outlives its driver.
All fast: nothing here starts Ray or verl's trainer (the slow resume test in tests/e2e/test_train_cpu.py
runs the real thing)."""
import json
import os
import re
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest
from omegaconf import OmegaConf
from hydra import compose, initialize_config_dir

from soft_spatial.infra.dirlock import DirLock, DirLockedError
from soft_spatial.train import CONFIG_DIR, preflight, run
from soft_spatial.infra import ray_session
from soft_spatial.infra.run_dir import SUPERSEDED, keep_metrics_until, resume_step

ROOT = Path(__file__).resolve().parents[1]


def compose_train(*overrides, hydra=False):
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
        return compose(config_name="train", overrides=list(overrides), return_hydra_config=hydra)


@pytest.fixture(scope="module")
def parquet(tmp_path_factory, tiny_qwen3_vl_small):
    from train_helpers import prepare_train_data
    return prepare_train_data(tmp_path_factory.mktemp("data"), tiny_qwen3_vl_small)


def train_cfg(model, data, out, *overrides):
    return compose_train("model=tiny", "cluster=cpu", f"model.path={model}",
                         f"data.train_files={data / 'train.parquet'}",
                         f"data.val_files={data / 'test.parquet'}",
                         f"trainer.default_local_dir={out}", *overrides)


# -- errors before Ray starts, naming the setting --------------------------------------------------
@pytest.mark.parametrize("override, message", [
    ("soft_thinking.top_k=0", "top_k"),
    ("soft_thinking.mode=softest", "mode"),
    ("actor_rollout_ref.rollout.temperature=-1", "actor_rollout_ref.rollout.temperature must be >= 0"),
    ("model.path=/nonexistent/mistyped", "model.path='/nonexistent/mistyped' does not exist"),
    ("data.train_files=/nonexistent/train.parquet", "data.train_files: training data /nonexistent"),
    # a budget verl would read as "nothing to train" (exit 0), a bare ValueError, or 2 steps
    ("trainer.total_training_steps=-1", "trainer.total_training_steps must be a positive integer .* got -1"),
    ("trainer.total_training_steps=0", "trainer.total_training_steps must be a positive integer .* got 0"),
    ("trainer.total_training_steps=abc", "trainer.total_training_steps must be a positive integer .* got 'abc'"),
    ("trainer.total_training_steps=1.5", "trainer.total_training_steps must be a positive integer .* got 1.5"),
])
def test_preflight_names_the_bad_setting(override, message, tiny_qwen3_vl_small, parquet, tmp_path):
    cfg = train_cfg(tiny_qwen3_vl_small, parquet, tmp_path / "run", override)
    with pytest.raises((ValueError, FileNotFoundError), match=message):
        preflight(cfg)
    assert preflight(train_cfg(tiny_qwen3_vl_small, parquet, tmp_path / "run")) == Path(
        str(tiny_qwen3_vl_small))


def test_preflight_parses_the_soft_settings_once(tiny_qwen3_vl_small, parquet, tmp_path):
    """rollout.custom becomes SoftSettings.to_dict(): every setting explicit, what workers and servers read."""
    from soft_spatial.softthink.settings import SoftSettings
    cfg = train_cfg(tiny_qwen3_vl_small, parquet, tmp_path / "run", "soft_thinking.top_k=3", "alignment.lr=0.01")
    preflight(cfg)
    custom = OmegaConf.to_container(cfg.actor_rollout_ref.rollout.custom)
    s = SoftSettings.from_dict(custom)
    assert custom == s.to_dict() and (s.soft_thinking.top_k, s.alignment.lr) == (3, 0.01)
    cfg = train_cfg(tiny_qwen3_vl_small, parquet, tmp_path / "run", "adaptsoft.width=wide")
    with pytest.raises(ValueError, match=r"^actor_rollout_ref\.rollout\.custom\.adaptsoft: AdaptSoftConfig\.width"):
        preflight(cfg)


@pytest.mark.parametrize("override, message", [
    # the loss would then depend on every logit of a soft step: the controller's K-sparse d_t is not exact
    ("actor_rollout_ref.actor.entropy_coeff=0.01", "entropy_coeff=0.01"),
    ("actor_rollout_ref.actor.loss_agg_mode=token-sum", "loss_agg_mode='token-sum'"),
])
def test_preflight_warns_about_actor_settings_that_break_the_method(override, message, tiny_qwen3_vl_small,
                                                                     parquet, tmp_path):
    cfg = train_cfg(tiny_qwen3_vl_small, parquet, tmp_path / "run", override)
    with pytest.warns(RuntimeWarning, match=f"soft_spatial actor config: {re.escape(message)}"):
        preflight(cfg)
    with warnings.catch_warnings(record=True) as seen:  # the paper's configuration: no warning
        warnings.simplefilter("always")
        preflight(train_cfg(tiny_qwen3_vl_small, parquet, tmp_path / "run"))
    assert not [w for w in seen if "soft_spatial actor config" in str(w.message)]


def test_a_trailing_slash_on_the_model_path_is_dropped(tiny_qwen3_vl_small, parquet, tmp_path):
    """verl's copy_to_local asserts that a path does not end in "/"; shell completion adds one."""
    from verl.utils.fs import copy_to_local
    cfg = train_cfg(f"{tiny_qwen3_vl_small}/", parquet, tmp_path / "run")
    with pytest.raises(AssertionError, match="last char"):
        copy_to_local(str(cfg.actor_rollout_ref.model.path))
    assert preflight(cfg) == Path(tiny_qwen3_vl_small)
    assert cfg.actor_rollout_ref.model.path == cfg.model.path == str(tiny_qwen3_vl_small)
    assert copy_to_local(str(cfg.actor_rollout_ref.model.path)) == str(tiny_qwen3_vl_small)


def test_training_cli_fails_before_ray_on_a_mistyped_model_path(tmp_path):
    res = subprocess.run(
        [sys.executable, "-m", "soft_spatial.train", "model=tiny", "cluster=cpu",
         f"model.path={tmp_path / 'mistyped'}", f"trainer.default_local_dir={tmp_path / 'run'}"],
        capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert res.returncode != 0
    assert f"model.path='{tmp_path / 'mistyped'}' does not exist" in res.stderr
    assert not (tmp_path / "mistyped").exists()  # no random model was built in its place
    assert "Ray instance" not in res.stdout + res.stderr  # Ray was never started
    assert not (tmp_path / "outputs").exists()  # Hydra wrote nothing where the command ran
    assert not (tmp_path / "run").exists()  # nor in the run directory (tests/e2e/test_train_refused.py)


def test_hydra_writes_nothing_itself_and_sweeps_go_under_the_run_directory():
    cfg = compose_train("trainer.default_local_dir=/data/runs/x", hydra=True)
    assert cfg.hydra.run.dir == "." and cfg.hydra.output_subdir is None  # the run writes its record
    assert cfg.hydra.sweep.dir.startswith("/data/runs/x/hydra/")


# -- one writer per run directory ------------------------------------------------------------------
def test_a_second_training_run_into_a_locked_directory_fails_at_once(tiny_qwen3_vl_small, parquet,
                                                                      tmp_path):
    out = tmp_path / "run"
    env = dict(os.environ)
    try:
        with DirLock(out, "training run directory"):  # a run in progress (this process)
            with pytest.raises(DirLockedError, match=f"training run directory {out} is in use by "
                                                     f"pid {os.getpid()} "):
                run(train_cfg(tiny_qwen3_vl_small, parquet, out))
    finally:  # run() exports the plugin environment
        os.environ.clear()
        os.environ.update(env)


# -- a finished run trains nothing; a step is checkpointed after its metrics are logged ----------
def _finished_run(out, step):
    out.mkdir(parents=True, exist_ok=True)
    (out / f"global_step_{step}").mkdir()
    (out / "latest_checkpointed_iteration.txt").write_text(str(step))
    (out / "metrics.jsonl").write_text(metrics_lines(range(1, step + 1), "done"))


def _tree(path):
    return {p: p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file() and p.name != ".lock"}


def test_a_finished_run_exits_before_ray_and_changes_nothing(tiny_qwen3_vl_small, parquet, tmp_path,
                                                            monkeypatch, capsys):
    out = tmp_path / "run"
    _finished_run(out, 3)
    before = _tree(out)

    def no_ray(*args, **kwargs):
        raise AssertionError("a finished run started a Ray session")
    monkeypatch.setattr(ray_session, "reap_orphans", no_ray)
    monkeypatch.setattr(ray_session, "start_watchdog", no_ray)
    env = dict(os.environ)
    try:
        run(train_cfg(tiny_qwen3_vl_small, parquet, out, "trainer.total_training_steps=3"))
    finally:  # run() exports the plugin environment
        os.environ.clear()
        os.environ.update(env)
    assert "finished: the latest checkpoint is step 3, trainer.total_training_steps=3" in capsys.readouterr().out
    assert _tree(out) == before


# -- the run directory is checked before anything is written or Ray starts (issue 44) -----------
@pytest.fixture()
def no_ray(monkeypatch):
    """Training stopped where Ray would start; ``trained`` (a callable of the run directory) stands
    for what a training run leaves there. The plugin environment run() exports is restored."""
    import soft_spatial.train as train
    calls = []

    def refused(*args, **kwargs):
        raise AssertionError("a refused run started a Ray session")
    monkeypatch.setattr(ray_session, "reap_orphans", refused)
    monkeypatch.setattr(ray_session, "start_watchdog", refused)
    monkeypatch.setattr(train, "runtime_env", lambda cfg, env: None)
    monkeypatch.setattr(train, "run_verl", lambda cfg: calls.append(cfg))
    env = dict(os.environ)
    yield calls
    os.environ.clear()
    os.environ.update(env)


def _trained(cfg, out, steps=(1,)):
    """What training leaves in ``out``: each step's checkpoint (with the controller of an adaptsoft
    run and the settings that trained it) and verl's tracker."""
    from soft_spatial.actor.adaptsoft_trainer import AdaptSoftTrainer
    from soft_spatial.softthink import AdaptSoft
    from soft_spatial.softthink.settings import CONTROLLER_FILE, SETTINGS_FILE, SoftSettings
    settings = SoftSettings.from_rollout(cfg.actor_rollout_ref.rollout)
    for step in steps:
        actor = out / f"global_step_{step}" / "actor"
        actor.mkdir(parents=True)
        (actor / "model_world_size_1_rank_0.pt").write_bytes(b"weights")
        settings.save(actor.parent / SETTINGS_FILE)
        if settings.soft_thinking.mode == "adaptsoft":
            AdaptSoftTrainer(AdaptSoft(hidden_size=8, width=4)).save(actor / CONTROLLER_FILE)
    (out / "latest_checkpointed_iteration.txt").write_text(str(steps[-1]))


def _accepted_run(model, data, out, no_ray, *overrides):
    cfg = train_cfg(model, data, out, *overrides)
    run(cfg)
    assert len(no_ray) == 1  # reached verl
    _trained(cfg, out)
    return cfg


def test_a_run_is_not_resumed_under_other_soft_settings(tiny_qwen3_vl_small, parquet, tmp_path, no_ray):
    """Resumed under another method, the run went on with it and its soft_settings.yaml (what export
    copies, for every checkpoint) was overwritten: refused before Ray, naming what differs."""
    from soft_spatial.infra.provenance import OutputKeyMismatch
    out = tmp_path / "run"
    _accepted_run(tiny_qwen3_vl_small, parquet, out, no_ray, "trainer.total_training_steps=3")
    assert (out / "soft_settings.key.json").is_file() and (out / "soft_settings.yaml").is_file()
    before = _tree(out)
    for override, message in (("experiment=hard", r"soft_thinking\.mode: adaptsoft -> hard"),
                              ("soft_thinking.top_k=3", r"soft_thinking\.top_k: 5 -> 3"),
                              ("adaptsoft.tau0=0.6", r"adaptsoft\.tau0: 0\.5 -> 0\.6")):
        for mode in ("auto", "disable"):  # resumed, or trained again over its checkpoints
            with pytest.raises(OutputKeyMismatch, match=f"(?s)the checkpoints in {out}.*{message}"):
                run(train_cfg(tiny_qwen3_vl_small, parquet, out, "trainer.total_training_steps=3", override,
                              f"trainer.resume_mode={mode}"))
    assert _tree(out) == before and len(no_ray) == 1
    run(train_cfg(tiny_qwen3_vl_small, parquet, out, "trainer.total_training_steps=3",
                  "replay_check.bound=2.0"))  # a check, not the method: resumed
    assert len(no_ray) == 2


def test_a_run_from_before_the_key_is_compared_with_its_settings_file(tiny_qwen3_vl_small, parquet,
                                                                      tmp_path, no_ray):
    from soft_spatial.infra.provenance import OutputKeyMismatch
    out = tmp_path / "run"
    _accepted_run(tiny_qwen3_vl_small, parquet, out, no_ray)
    (out / "soft_settings.key.json").unlink()
    before = _tree(out)
    with pytest.raises(OutputKeyMismatch, match=f"(?s)recorded in {out / 'soft_settings.yaml'}.*top_k: 5 -> 3"):
        run(train_cfg(tiny_qwen3_vl_small, parquet, out, "soft_thinking.top_k=3"))
    assert _tree(out) == before


def _missing_folder(out):
    (out / "latest_checkpointed_iteration.txt").write_text("2")  # global_step_2 deleted


def _tracker(text):
    return lambda out: (out / "latest_checkpointed_iteration.txt").write_text(text)


def _controller(content):
    def damage(out):
        path = out / "global_step_1" / "actor" / "adaptsoft.pt"
        if content is None:
            path.unlink()
        else:
            path.write_bytes(path.read_bytes()[:content])  # truncated (a full disk, a partial copy)
    return damage


DAMAGES = {
    "missing checkpoint": (_missing_folder, FileNotFoundError,
                           r"latest_checkpointed_iteration.txt names step 2, but its checkpoint .*global_step_2 is "
                           r"missing.*folders left are global_step_1: resume from one with "
                           r"trainer.resume_mode=resume_path"),
    "empty tracker": (_tracker(""), ValueError,
                      r"latest_checkpointed_iteration.txt: expected the step .* found '': the run "),
    "garbled tracker": (_tracker("1x\n"), ValueError,
                        r"latest_checkpointed_iteration.txt: expected the step .* found '1x'"),
    "truncated controller": (_controller(100), ValueError,
                             r"global_step_1/actor/adaptsoft.pt: not a whole AdaptSoft checkpoint"),
    "no controller": (_controller(None), FileNotFoundError, r"global_step_1/actor/adaptsoft.pt is missing"),
}


def test_a_run_that_cannot_resume_as_asked_is_refused_before_ray(tiny_qwen3_vl_small, parquet, tmp_path, no_ray):
    """A tracker naming a deleted checkpoint restarted training from step 0 over the run's
    checkpoints; a garbled one, a truncated controller failed late with bare errors. Each damage to
    a copy of one run."""
    import shutil
    trained = tmp_path / "trained"
    _accepted_run(tiny_qwen3_vl_small, parquet, trained, no_ray, "trainer.total_training_steps=3")
    for name, (damage, error, message) in DAMAGES.items():
        out = Path(shutil.copytree(trained, tmp_path / name.replace(" ", "-")))
        damage(out)
        before = _tree(out)
        with pytest.raises(error, match=message):
            run(train_cfg(tiny_qwen3_vl_small, parquet, out, "trainer.total_training_steps=3"))
        assert _tree(out) == before and len(no_ray) == 1, name


def test_resume_path_names_a_missing_folder(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"trainer.resume_from_path=.*global_step_3: no such checkpoint"):
        resume_step(tmp_path, "resume_path", str(tmp_path / "global_step_3"))
    with pytest.raises(ValueError, match=r"resume_from_path=.../global_step_N, got '.*global_step_x'"):
        resume_step(tmp_path, "resume_path", str(tmp_path / "global_step_x"))


@pytest.fixture(scope="module")
def trainer_module():
    from soft_spatial.integration.platform import use_cpu_platform

    use_cpu_platform()  # the platform must exist before verl's trainer imports
    from soft_spatial.integration import ppo_trainer
    return ppo_trainer


def _bare_trainer(trainer_module, out, total, settings=None):
    from omegaconf import OmegaConf

    from soft_spatial.softthink.settings import SoftSettings
    trainer = object.__new__(trainer_module.SoftRayPPOTrainer)  # no workers: the loop is faked
    custom = (settings or SoftSettings()).to_dict()
    trainer.config = OmegaConf.create({"trainer": {"default_local_dir": str(out), "resume_mode": "auto",
                                                   "resume_from_path": None},
                                       "actor_rollout_ref": {"rollout": {"custom": custom}}})
    trainer.total_training_steps = total  # as verl derives it (also from the data when null)
    return trainer


def test_the_trainer_trains_no_step_past_its_budget(trainer_module, tmp_path, monkeypatch, capsys):
    """verl 0.9.1's fit, resumed at its budget, trains one more step (it tests the budget after
    a step); the trainer returns before the loop, whatever set the budget."""
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer
    calls = []
    monkeypatch.setattr(RayPPOTrainer, "fit", lambda self: calls.append(self.total_training_steps))
    _finished_run(tmp_path, 3)
    assert _bare_trainer(trainer_module, tmp_path, 3).fit() is None and calls == []
    assert "finished: the latest checkpoint is step 3" in capsys.readouterr().out
    _bare_trainer(trainer_module, tmp_path, 4).fit()  # a raised budget trains on
    assert calls == [4]


def test_a_step_is_checkpointed_after_its_metrics_are_logged(trainer_module, tmp_path, monkeypatch):
    """verl 0.9.1's loop saves step N, then logs its metrics: a run killed in between resumed
    after a step whose metrics were lost. The trainer writes the checkpoint once they are logged,
    the soft settings that trained it into its folder first (what export copies: issue 44)."""
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer

    from soft_spatial.softthink import SoftThinkingConfig
    from soft_spatial.softthink.settings import SETTINGS_FILE, SoftSettings
    events = []

    def verl_loop(self):  # the order of verl 0.9.1's fit (checked by tests/compat/test_verl.py)
        from verl.utils.tracking import Tracking
        logger = Tracking(project_name="p", experiment_name="e", default_backend=[])
        for step in range(1, self.total_training_steps + 1):
            self.global_steps = step
            if step % 2 == 0:
                self._save_checkpoint()
            events.append(("log", step))
            logger.log(data={}, step=step)

    def verl_save(self):  # the settings that trained the checkpoint are in its folder already
        settings = SoftSettings.load(tmp_path / f"global_step_{self.global_steps}" / SETTINGS_FILE)
        events.append(("saved", self.global_steps, settings.soft_thinking.top_k))

    monkeypatch.setattr(RayPPOTrainer, "fit", verl_loop)
    monkeypatch.setattr(RayPPOTrainer, "_save_checkpoint", verl_save)
    settings = SoftSettings(soft_thinking=SoftThinkingConfig(top_k=3))
    _bare_trainer(trainer_module, tmp_path, 4, settings).fit()
    assert events == [("log", 1), ("log", 2), ("saved", 2, 3), ("log", 3), ("log", 4), ("saved", 4, 3)]
    from verl.utils import tracking
    assert tracking.Tracking.log is not None and tracking.Tracking.__name__ == "Tracking"  # restored


# -- metrics survive a resume ----------------------------------------------------------------------
def metrics_lines(steps, tag):
    return "".join(json.dumps({"step": s, "data": {"tag": tag}}) + "\n" for s in steps)


def test_verl_file_logger_appends(tmp_path, monkeypatch):
    from verl.utils import tracking

    from soft_spatial.compat.verl.trainer import append_file_logger
    path = tmp_path / "metrics.jsonl"
    monkeypatch.setenv("VERL_FILE_LOGGER_PATH", str(path))
    monkeypatch.setattr(tracking, "FileLogger", tracking.FileLogger)  # restored after the test
    path.write_text(metrics_lines([1, 2], "before"))
    upstream = tracking.FileLogger("p", "e")  # verl 0.9.1 truncates: the reason for the patch
    upstream.finish()
    assert path.read_text() == ""
    path.write_text(metrics_lines([1, 2], "before"))
    append_file_logger()
    append_file_logger()  # idempotent
    logger = tracking.FileLogger("p", "e")  # what Tracking builds for the "file" backend
    logger.log({"tag": "after"}, step=3)
    logger.finish()
    assert [json.loads(line)["step"] for line in path.read_text().splitlines()] == [1, 2, 3]
    # the upstream internals this relies on: tests/compat/test_verl.py (check_internals)


def test_resume_keeps_the_metrics_up_to_the_checkpoint(tmp_path):
    path = tmp_path / "metrics.jsonl"
    # a run killed after logging step 5 whose last checkpoint is step 4, plus a torn line
    path.write_text(metrics_lines([1, 2, 3, 4, 5], "first") + '{"step": 6, "da')
    assert keep_metrics_until(path, 4) == 2
    assert [json.loads(line)["step"] for line in path.read_text().splitlines()] == [1, 2, 3, 4]
    superseded = (tmp_path / SUPERSEDED).read_text().splitlines()
    assert json.loads(superseded[0])["step"] == 5 and superseded[1] == '{"step": 6, "da'
    assert keep_metrics_until(path, 4) == 0  # nothing more to move
    assert keep_metrics_until(tmp_path / "absent.jsonl", 3) == 0


def test_one_reader_of_the_metrics_merges_a_steps_lines_and_names_a_bad_line(tmp_path):
    """infra/run_dir.py reads metrics.jsonl for the learning experiment's report and the analysis."""
    from soft_spatial.infra.run_dir import read_metrics
    from soft_spatial.lab.learning import report
    from soft_spatial.lab.paper.analysis import data
    assert report.read_metrics is read_metrics and data.read_metrics is read_metrics
    path = tmp_path / "metrics.jsonl"
    lines = [{"step": 1, "data": {"a": 1}}, {"step": 2, "data": {"a": 2, "b": 2}},
             {"step": 2, "data": {"val/x": 3}},  # verl's validation line at a resumed step
             {"step": 2, "data": {"a": 4}}]  # the step logged again: the later value wins
    path.write_text("".join(json.dumps(x) + "\n" for x in lines) + '{"step": 3, "da')  # torn: dropped
    assert read_metrics(path) == [{"step": 1, "a": 1}, {"step": 2, "a": 4, "b": 2, "val/x": 3}]
    assert read_metrics(tmp_path / "absent.jsonl") == []
    path.write_text(json.dumps(lines[0]) + "\n{not json\n" + json.dumps(lines[1]) + "\n")
    with pytest.raises(ValueError, match=f"{path}: line 2: invalid JSON"):
        read_metrics(path)
    path.write_text(json.dumps(lines[0]) + "\n" + json.dumps({"step": 2, "data": [1]}) + "\n")
    with pytest.raises(ValueError, match=f"{path}: line 2: not a metrics line of verl's file logger"):
        read_metrics(path)


def test_resume_step_follows_verl(tmp_path):
    from verl.utils.checkpoint.checkpoint_manager import find_latest_ckpt_path
    assert resume_step(tmp_path, "auto") == 0
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("3")  # tracker, no directory
    assert find_latest_ckpt_path(str(tmp_path)) is None  # verl would train from step 0: refused
    with pytest.raises(FileNotFoundError, match="global_step_3 is missing"):
        resume_step(tmp_path, "auto")
    (tmp_path / "global_step_4").mkdir()
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("4")
    assert resume_step(tmp_path, "auto") == 4
    assert find_latest_ckpt_path(str(tmp_path)).endswith("global_step_4")  # verl agrees
    assert resume_step(tmp_path, "disable") == 0
    (tmp_path / "global_step_2").mkdir()
    assert resume_step(tmp_path, "resume_path", str(tmp_path / "global_step_2")) == 2
    with pytest.raises(ValueError, match="resume_from_path"):
        resume_step(tmp_path, "resume_path", None)
    # the entry point of a CPU run has VERL_PLATFORM=cpu and no CPU platform plugin loaded:
    # importing verl's checkpoint module there fails, so resume_step must not
    res = subprocess.run([sys.executable, "-c", "import sys; from soft_spatial.infra.run_dir "
                          "import resume_step; print(resume_step(sys.argv[1], 'auto'))",
                          str(tmp_path)], capture_output=True, text=True, timeout=300,
                         env=dict(os.environ, VERL_PLATFORM="cpu"))
    assert res.returncode == 0 and res.stdout.split()[-1] == "4", res.stderr[-2000:]


# -- a local Ray session never outlives its driver --------------------------------------------------
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


def test_the_local_ray_directory_is_this_users_alone(tiny_qwen3_vl_small, parquet, tmp_path, monkeypatch,
                                                    no_ray):
    """/tmp/ssray-<uid> was created with exist_ok=True and used whatever it was: one another user
    made first (theirs, or writable by everyone) let them swap the session's files, its token too."""
    root = tmp_path / "ssray"
    monkeypatch.setattr(ray_session, "runs_root", lambda: root)
    root.mkdir()
    root.chmod(0o777)  # made by someone else first, writable by all
    with pytest.raises(ray_session.UnsafeDirectory, match=f"{root} may be written by others .* remove it"):
        ray_session.run_ray_dir()
    with pytest.raises(ray_session.UnsafeDirectory):  # training refuses it before writing anything
        run(train_cfg(tiny_qwen3_vl_small, parquet, tmp_path / "run"))
    assert not (tmp_path / "run").exists() and not no_ray
    assert sorted(root.iterdir()) == []  # nothing was created in it
    root.chmod(0o755)  # this user's, readable by others (made before this check): tightened
    path = ray_session.run_ray_dir()
    assert path.parent == root and [oct(p.stat().st_mode & 0o777) for p in (root, path)] == ["0o700"] * 2
    with pytest.raises(ray_session.UnsafeDirectory, match=f"{root} belongs to uid {os.getuid()}, not"):
        ray_session.private_dir(root, uid=os.getuid() + 1)  # as another user sees this one
    link = tmp_path / "link"
    link.symlink_to(root)
    with pytest.raises(ray_session.UnsafeDirectory, match="is not a directory"):
        ray_session.private_dir(link)
    ray_session.kill_session(path)
