"""python -m soft_spatial.export: one directory per trained model, picked up by evaluation. A real
export of a trained run, evaluated from the export alone, is part of
tests/e2e/test_train_cpu.py::test_train_resume_export_and_evaluate."""
from pathlib import Path

import pytest
import yaml
from hydra import compose, initialize_config_dir

from soft_spatial.eval.__main__ import CONFIG_DIR, apply_exported, build_config
from soft_spatial.export import actor_dir, export, main
from soft_spatial.softthink import AdaptSoft, AdaptSoftConfig, SoftThinkingConfig
from soft_spatial.softthink.settings import CONTROLLER_FILE, SETTINGS_FILE, SoftSettings

ROOT = Path(__file__).resolve().parents[1]


def _fake_export(tmp_path: Path, mode: str = "adaptsoft") -> Path:
    out = tmp_path / "exported"
    out.mkdir(parents=True)
    SoftSettings(soft_thinking=SoftThinkingConfig(mode=mode, top_k=3, noise_scale=0.5, fixed_tau=0.4),
                 seed=9).save(out / SETTINGS_FILE)  # as training writes it
    AdaptSoft(hidden_size=8, width=4).save(out / CONTROLLER_FILE)
    (out / "config.json").write_text("{}")  # evaluation checks model.path is a model directory
    return out


def _compose(overrides):
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
        return compose(config_name="eval", overrides=overrides)


def test_exported_settings_apply_and_the_command_line_wins(tmp_path):
    out = _fake_export(tmp_path)
    cfg = _compose([f"model.path={out}"])
    taken = apply_exported(cfg, [f"model.path={out}"])
    # what differs from the composed config is taken; not the rollout server's seed (eval has its own)
    assert set(taken) == {"soft_thinking.top_k", "soft_thinking.noise_scale", "soft_thinking.fixed_tau",
                          "controller"}
    assert cfg.seed == 0
    ecfg = build_config(cfg)
    st = ecfg.soft_thinking
    assert (st.mode, st.top_k, st.noise_scale, st.fixed_tau) == ("adaptsoft", 3, 0.5, 0.4)
    assert ecfg.controller == str(out / CONTROLLER_FILE)

    given = [f"model.path={out}", "mode=fixed", "soft_thinking.top_k=7"]
    cfg = _compose(given)
    apply_exported(cfg, given)
    ecfg = build_config(cfg)
    st = ecfg.soft_thinking
    assert (st.mode, st.top_k, st.noise_scale) == ("fixed", 7, 0.5)
    assert ecfg.controller is None  # no controller outside adaptsoft mode

    out_fixed = _fake_export(tmp_path / "fixed", mode="fixed")
    for given, mode in (([], "fixed"), (["mode=adaptsoft"], "adaptsoft"), (["soft_thinking.mode=hard"], "hard")):
        given = [f"model.path={out_fixed}", *given]
        cfg = _compose(given)
        apply_exported(cfg, given)
        assert cfg.mode == mode and build_config(cfg).soft_thinking.mode == mode

    elsewhere = tmp_path / "elsewhere.pt"
    AdaptSoft(hidden_size=8, width=4).save(elsewhere)
    given = [f"model.path={out}", f"controller={elsewhere}"]
    cfg = _compose(given)
    apply_exported(cfg, given)
    assert build_config(cfg).controller == str(elsewhere)


def test_an_export_with_entropy_or_another_controller_keeps_those_adaptsoft_settings(tmp_path):
    out = tmp_path / "exported"
    out.mkdir()
    SoftSettings(adaptsoft=AdaptSoftConfig(entropy_mean=0.5, entropy_std=0.6, width=4)).save(out / SETTINGS_FILE)
    cfg = _compose([f"model.path={out}"])
    assert set(apply_exported(cfg, [])) == {"adaptsoft.entropy_mean", "adaptsoft.entropy_std", "adaptsoft.width"}
    cfg = _compose([f"model.path={out}"])
    assert apply_exported(cfg, ["entropy=mine"]) == ["adaptsoft.width"]  # entropy=<name> sets mu_H, sigma_H
    cfg = _compose([f"model.path={out}"])
    assert apply_exported(cfg, ["controller=/elsewhere.pt"]) == []  # its settings come with it


def test_a_plain_model_directory_changes_nothing(tmp_path):
    cfg = _compose([f"model.path={tmp_path}"])
    before = dict(cfg.soft_thinking)
    assert apply_exported(cfg, []) == [] and dict(cfg.soft_thinking) == before


def test_actor_dir_names_what_is_missing(tmp_path):
    with pytest.raises(FileNotFoundError, match="no FSDP actor checkpoint"):
        actor_dir(tmp_path)


def _fake_checkpoint(tmp_path: Path, mode: str, controller: bool = False) -> Path:
    """A trainer directory whose step 1 has an (unreadable) FSDP shard and the run's settings."""
    ckpt = tmp_path / "ckpt"
    actor = ckpt / "global_step_1" / "actor"
    actor.mkdir(parents=True)
    (actor / "model_world_size_1_rank_0.pt").write_bytes(b"not a checkpoint")
    (ckpt / "latest_checkpointed_iteration.txt").write_text("1")
    (ckpt / SETTINGS_FILE).write_text(yaml.safe_dump({"soft_thinking": {"mode": mode}}))
    if controller:
        AdaptSoft(hidden_size=8, width=4).save(actor / CONTROLLER_FILE)
    return ckpt


def test_an_adaptsoft_checkpoint_without_its_controller_is_refused_before_anything_is_written(tmp_path):
    ckpt = _fake_checkpoint(tmp_path, "adaptsoft")
    before = sorted(p for p in tmp_path.rglob("*"))
    missing = ckpt / "global_step_1" / "actor" / CONTROLLER_FILE
    with pytest.raises(FileNotFoundError, match=f"{missing} is missing: .*soft_thinking.mode=adaptsoft"):
        export(ckpt, tmp_path / "out")
    assert sorted(p for p in tmp_path.rglob("*")) == before  # no OUT, no OUT.partial


@pytest.mark.parametrize("mode, controller", [("hard", False), ("adaptsoft", True)])
def test_a_failed_export_leaves_no_partial_directory(tmp_path, mode, controller):
    """The controller check passes (a hard run needs none); verl's merger then fails on the shard."""
    ckpt = _fake_checkpoint(tmp_path, mode, controller)
    with pytest.raises(RuntimeError, match="verl's model merger failed"):
        export(ckpt, tmp_path / "out")
    assert not (tmp_path / "out").exists() and not (tmp_path / "out.partial").exists()


def _tree(root: Path) -> dict:
    return {p: p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("where", ["the run", "the step", "the actor", "inside the run",
                                   "a parent of the run"])
def test_an_output_overlapping_the_checkpoint_is_refused_and_the_run_kept(tmp_path, where):
    """``export RUN/global_step_1 RUN --overwrite`` once exported, then deleted the whole run."""
    ckpt = _fake_checkpoint(tmp_path, "hard")
    out = {"the run": ckpt, "the step": ckpt / "global_step_1",
           "the actor": ckpt / "global_step_1" / "actor", "inside the run": ckpt / "final",
           "a parent of the run": tmp_path}[where]
    before = _tree(tmp_path)
    with pytest.raises(ValueError, match="would overlap the checkpoint"):
        export(ckpt / "global_step_1", out, overwrite=True)
    assert _tree(tmp_path) == before  # every byte of the run, and no OUT.partial
    assert not out.with_name(out.name + ".partial").exists()


def test_the_command_says_why_an_overlapping_output_is_refused(tmp_path, capsys):
    ckpt = _fake_checkpoint(tmp_path, "hard")
    with pytest.raises(SystemExit, match="would overlap the checkpoint"):
        main([str(ckpt / "global_step_1"), str(ckpt), "--overwrite"])
    assert (ckpt / "global_step_1" / "actor" / "model_world_size_1_rank_0.pt").is_file()


def _fake_merger(actor, target):
    """verl's merger, writing what it writes (a config and weights) without reading the shards."""
    target.mkdir(parents=True)
    (target / "config.json").write_text("{}")
    (target / "model.safetensors").write_bytes(b"weights")


def test_an_output_that_is_a_link_to_an_empty_directory_is_written_through(tmp_path, monkeypatch):
    """Weights kept on another file system: OUT links to an empty directory there. The export
    merged, then failed on rmtree of the link and left OUT.partial."""
    import soft_spatial.export as export_module
    monkeypatch.setattr(export_module, "run_merger", _fake_merger)
    ckpt = _fake_checkpoint(tmp_path / "run", "hard")
    target = tmp_path / "elsewhere" / "weights"
    target.mkdir(parents=True)
    out = tmp_path / "out"
    out.symlink_to(target)
    assert export(ckpt, out) == out
    assert out.is_symlink() and out.resolve() == target.resolve()
    assert sorted(p.name for p in target.iterdir()) == ["config.json", "model.safetensors", SETTINGS_FILE]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["elsewhere", "out", "run"]  # no OUT.partial
    assert sorted(p.name for p in target.parent.iterdir()) == ["weights"]  # nor beside the target
    with pytest.raises(FileExistsError, match="not empty"):  # no longer empty: refused as any OUT
        export(ckpt, out)
    assert export(ckpt, out, overwrite=True) == out and out.is_symlink()
    assert sorted(p.name for p in target.parent.iterdir()) == ["weights"]


def test_export_carries_the_settings_that_trained_the_checkpoint(tmp_path, monkeypatch):
    """Each checkpoint keeps the settings that trained it (global_step_N/soft_settings.yaml,
    tests/test_train.py::test_a_step_is_checkpointed_after_its_metrics_are_logged); the run's file
    serves a run from before that."""
    import soft_spatial.export as export_module
    monkeypatch.setattr(export_module, "run_merger", _fake_merger)
    ckpt = _fake_checkpoint(tmp_path, "hard")  # the run's file says hard
    own = SoftSettings(soft_thinking=SoftThinkingConfig(mode="fixed", top_k=3))
    own.save(ckpt / "global_step_1" / SETTINGS_FILE)
    export(ckpt, tmp_path / "out")
    assert SoftSettings.load(tmp_path / "out" / SETTINGS_FILE) == own


@pytest.mark.parametrize("text", ["", "one\n", "2x"])
def test_a_garbled_tracker_is_named_with_its_run(tmp_path, text):
    ckpt = _fake_checkpoint(tmp_path, "hard")
    (ckpt / "latest_checkpointed_iteration.txt").write_text(text)
    with pytest.raises(ValueError, match=f"{ckpt / 'latest_checkpointed_iteration.txt'}: expected the step "
                                         f".*found {text.strip()!r}: the run {ckpt} "):
        export(ckpt, tmp_path / "out")
    assert not (tmp_path / "out").exists()
