"""The training entry point around verl: checks before Ray starts, the run directory (lock, a
finished run, a resume refused before Ray, Hydra's files), the trainer's budget and checkpoint
order, and the local Ray directory. All fast: nothing here starts Ray or verl's trainer (the slow
resume test in tests/e2e/test_train_cpu.py runs the real thing). The run directory's resume step
and metrics: tests/infra/test_run_dir.py; the local Ray session that never outlives its driver:
tests/infra/test_ray_session.py."""
import json
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from omegaconf import OmegaConf
from hydra import compose, initialize_config_dir

from soft_spatial.infra.dirlock import DirLock, DirLockedError
from soft_spatial.train import CONFIG_DIR, preflight, run
from soft_spatial.infra import ray_session
from train_helpers import metrics_lines

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
    # issue 55 items 12-13: found after Ray, the model load and the rollout's start (79 s), or accepted
    ("soft_thinking.top_k=577", r"soft_thinking\.top_k=577 is more than the vocabulary of model\.path=.* \(576 tokens"),
    ("+actor_rollout_ref.rollout.custom.max_batch_rows=0", "custom: max_batch_rows must be >= 1, got 0"),
])
def test_preflight_names_the_bad_setting(override, message, tiny_qwen3_vl_small, parquet, tmp_path):
    cfg = train_cfg(tiny_qwen3_vl_small, parquet, tmp_path / "run", override)
    with pytest.raises((ValueError, FileNotFoundError), match=message):
        preflight(cfg)
    assert preflight(train_cfg(tiny_qwen3_vl_small, parquet, tmp_path / "run")) == Path(
        str(tiny_qwen3_vl_small))


def test_a_run_directory_that_is_a_file_is_refused_in_preflight(tiny_qwen3_vl_small, parquet, tmp_path):
    """Issue 55 item 16: a FileExistsError traceback from the lock code, after the checks. A run
    directory inside the model directory is refused too: its checkpoints would change the model's
    fingerprint, the run's key (item 2), and its resume would be refused as another model's."""
    from soft_spatial.infra.dirlock import NotADirectoryOutput
    (tmp_path / "run").write_text("notes\n")
    for target in (tmp_path / "run", tmp_path / "run" / "sub"):
        with pytest.raises(NotADirectoryOutput, match=rf"^trainer\.default_local_dir={target} .*existing "
                                                      r"file, not a directory"):
            preflight(train_cfg(tiny_qwen3_vl_small, parquet, target))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]
    with pytest.raises(ValueError, match=r"trainer\.default_local_dir=.*/run lies inside model\.path="):
        preflight(train_cfg(tiny_qwen3_vl_small, parquet, tiny_qwen3_vl_small / "run"))
    assert not (tiny_qwen3_vl_small / "run").exists()


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
    monkeypatch.setattr(ray_session, "start_local", no_ray)
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
    monkeypatch.setattr(ray_session, "start_local", refused)
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


def test_a_run_is_not_resumed_under_another_key(tiny_qwen3_vl_small, parquet, tmp_path, no_ray):
    """Resumed under another method, the run went on with it and its soft_settings.yaml (what export
    copies, for every checkpoint) was overwritten; the key held the soft settings alone, so other
    data.train_files and another learning rate trained on without a word, and another model.path
    (same architecture, other weights) started Ray (issue 55 item 2). Each refused before Ray,
    naming what differs; accepted: a check, a raised budget, the same model elsewhere."""
    import shutil
    from soft_spatial.infra.provenance import OutputKeyMismatch
    out = tmp_path / "run"
    _accepted_run(tiny_qwen3_vl_small, parquet, out, no_ray, "trainer.total_training_steps=3")
    assert (out / "soft_settings.key.json").is_file() and (out / "soft_settings.yaml").is_file()
    other = Path(shutil.copytree(tiny_qwen3_vl_small, tmp_path / "other_weights"))
    weights = next(other.glob("*.safetensors"))
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF  # a fine-tune: other weights, the same architecture and files
    weights.write_bytes(bytes(data))
    before = _tree(out)
    for override, message, modes in (
            ("experiment=hard", r"soft_thinking\.mode: adaptsoft -> hard", ("auto", "disable")),
            ("soft_thinking.top_k=3", r"soft_thinking\.top_k: 5 -> 3", ("auto", "disable")),
            ("adaptsoft.tau0=0.6", r"adaptsoft\.tau0: 0\.5 -> 0\.6", ("auto",)),
            (f"model.path={other}", r"inputs\.model\.fingerprint: [0-9a-f]{64} -> [0-9a-f]{64}", ("auto",)),
            (f"data.train_files={parquet / 'test.parquet'}", r"inputs\.data\.train_files: \['[0-9a-f]{64}'\] -> ",
             ("auto",)),
            ("actor_rollout_ref.actor.optim.lr=3e-4", r"actor_rollout_ref\.actor\.optim\.lr: [0-9.e-]+ -> 0\.0003",
             ("auto",)),
            ("actor_rollout_ref.rollout.n=3", r"actor_rollout_ref\.rollout\.n: \d+ -> 3", ("auto",)),
            ("data.task_types=[Perspective_Taking,Dynamic_Reasoning]",
             r"data\.task_types: None -> \['Perspective_Taking', 'Dynamic_Reasoning'\]", ("auto",))):
        for mode in modes:  # resumed, or trained again over its checkpoints
            with pytest.raises(OutputKeyMismatch, match=f"(?s)the training run in {out} was made with other "
                                                        f".*{message}"):
                run(train_cfg(tiny_qwen3_vl_small, parquet, out, "trainer.total_training_steps=3", override,
                              f"trainer.resume_mode={mode}"))
    assert _tree(out) == before and len(no_ray) == 1
    run(train_cfg(tiny_qwen3_vl_small, parquet, out, "trainer.total_training_steps=3",
                  "replay_check.bound=2.0"))  # a check, not the method: resumed
    moved = Path(shutil.copytree(tiny_qwen3_vl_small, tmp_path / "moved_model"))  # the same bytes
    run(train_cfg(moved, parquet, out, "trainer.total_training_steps=4"))  # a raised budget trains on
    assert len(no_ray) == 3
    # a key of the soft settings alone (an earlier version's) is refused, saying so
    key = json.loads((out / "soft_settings.key.json").read_text())
    (out / "soft_settings.key.json").write_text(json.dumps({"settings": {"soft": key["settings"]["soft"]},
                                                            "inputs": {}}))
    before = _tree(out)
    with pytest.raises(OutputKeyMismatch, match=r"keys the soft settings only .* delete .*soft_settings\.key\.json"):
        run(train_cfg(tiny_qwen3_vl_small, parquet, out, "trainer.total_training_steps=4"))
    assert _tree(out) == before and len(no_ray) == 3


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

    def verl_loop(self):  # the order of verl 0.9.1's fit (checked by tests/compat/verl/test_checks.py)
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


    # the upstream internals this relies on: tests/compat/test_verl.py (check_internals)


# -- the local Ray directory is this user's alone (the session itself: tests/infra/test_ray_session.py) --


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
    path.rmdir()
