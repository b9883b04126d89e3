"""python -m soft_spatial.eval (`soft_spatial.eval.__main__`): the command end to end on the fixture_set,
its settings checked before anything is written, Hydra's record of an accepted run, and a refused
or finished run that changes nothing. The loop, the run key and the tables have their own files
(test_runner.py, test_runkey.py, test_report.py)."""
import re
import shutil
import signal
import subprocess
import sys

import pytest
from hydra import compose, initialize_config_dir

from eval_helpers import HOLD_LOCK, NoEngine, make_cfg, small, tree
from soft_spatial.eval import read_results
from soft_spatial.eval.__main__ import CONFIG_DIR
from soft_spatial.eval.runkey import RunKeyMismatch
from soft_spatial.infra.dirlock import DirLockedError


def test_cli_writes_outputs(fixture_set, tiny_qwen3_vl_small, tmp_path):
    out = tmp_path / "cli"
    res = subprocess.run(
        [sys.executable, "-m", "soft_spatial.eval", "benchmarks=[mindcube]",
         f"data.mindcube={fixture_set.mindcube}", f"model.path={tiny_qwen3_vl_small}",
         "mode=hard", "samples=1", "max_new_tokens=8", "limit=3", f"output_dir={out}"],
        capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "mindcube: overall" in res.stdout
    assert len(read_results(out / "samples.jsonl")) == 3
    assert (out / "mindcube.md").exists() and (out / "summary.json").exists()


def test_adaptsoft_without_controller_is_a_clear_error(fixture_set, tiny_qwen3_vl_small, tmp_path):
    with pytest.raises(ValueError, match="controller"):
        make_cfg(fixture_set, tiny_qwen3_vl_small, tmp_path, mode="adaptsoft")



def test_controller_settings_conflicts_and_missing_paths_are_errors(fixture_set, tiny_qwen3_vl_small,
                                                                   tmp_path):
    from controller_helpers import trained_controller
    ckpt = tmp_path / "ctrl.pt"
    trained_controller(64).save(ckpt)
    ok = make_cfg(fixture_set, tiny_qwen3_vl_small, tmp_path / "a", mode="adaptsoft", controller=ckpt)
    assert ok.controller == str(ckpt)
    with pytest.raises(ValueError, match=re.escape("adaptsoft.tau0=0.6 (checkpoint: 0.5)")):
        make_cfg(fixture_set, tiny_qwen3_vl_small, tmp_path / "a", mode="adaptsoft", controller=ckpt,
                 **{"adaptsoft.tau0": 0.6})
    with pytest.raises(ValueError, match="used only by mode=adaptsoft"):
        make_cfg(fixture_set, tiny_qwen3_vl_small, tmp_path / "a", mode="fixed", controller=ckpt)
    with pytest.raises(FileNotFoundError, match="missing.pt"):
        make_cfg(fixture_set, tiny_qwen3_vl_small, tmp_path / "a", mode="adaptsoft",
                 controller=tmp_path / "missing.pt")
    with pytest.raises(ValueError, match="limit must be >= 1"):
        make_cfg(fixture_set, tiny_qwen3_vl_small, tmp_path / "a", limit=0)


def test_a_missing_model_path_is_an_error_unless_a_tiny_model_is_asked_for(fixture_set, tiny_qwen3_vl_small,
                                                                          tmp_path, monkeypatch):
    import soft_spatial.models.tiny as tiny
    missing = tmp_path / "mistyped"
    with pytest.raises(FileNotFoundError, match=r"model.path='.*mistyped' does not exist.*build_tiny=true"):
        make_cfg(fixture_set, missing, tmp_path / "a")
    built = []
    monkeypatch.setattr(tiny, "build_tiny_model", lambda path, **kw: built.append(kw) or
                        shutil.copytree(tiny_qwen3_vl_small, path))
    cfg = make_cfg(fixture_set, missing, tmp_path / "a", **{"model.build_tiny": "true"})
    assert built == [{"family": "qwen3_vl", "vocab": "qwen"}] and cfg.model_path == str(missing)


def test_default_output_dir_names_the_model_path(tmp_path):
    def out(model, *more):
        with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
            return compose(config_name="eval", overrides=[f"model.path={model}", "mode=fixed", *more]).output_dir
    a, b = out(tmp_path / "one" / "model"), out(tmp_path / "two" / "model")
    assert a != b and a.startswith("runs/eval/model-") and a.endswith("-fixed-ours")
    # limit and task_types join the run key: a smoke run and the full run get directories of their own
    assert out(tmp_path / "one" / "model", "limit=2", "task_types=[Perspective_Taking,Egocentric]") == (
        a + "-limit2-Perspective_Taking+Egocentric")



def run_cli(monkeypatch, *args):
    """``python -m soft_spatial.eval ARGS`` in this process (Hydra and all), errors raised as is."""
    from soft_spatial.eval.__main__ import main
    monkeypatch.setenv("HYDRA_FULL_ERROR", "1")
    monkeypatch.setattr(sys, "argv", ["soft_spatial.eval", *map(str, args)])
    main()


def test_a_refused_eval_changes_nothing_and_a_finished_one_re_run_neither(
        fixture_set, tiny_qwen3_vl_small, tmp_path, monkeypatch):
    import yaml
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    out = tmp_path / "out"
    args = ["benchmarks=[omnispatial]", f"data.omnispatial={fixture_set.omnispatial}",
            f"model.path={tiny_qwen3_vl_small}", "mode=hard", "samples=1", "max_new_tokens=4",
            "limit=2", f"output_dir={out}"]
    run_cli(monkeypatch, *args)
    # the record of the accepted run: what Hydra's output_subdir held
    assert yaml.safe_load((out / "hydra" / "overrides.yaml").read_text()) == args
    assert yaml.safe_load((out / "hydra" / "config.yaml").read_text())["temperature"] == 0.6
    assert yaml.safe_load((out / "hydra" / "hydra.yaml").read_text())["hydra"]["job"]["name"]
    before = tree(out)
    assert len(read_results(out / "samples.jsonl")) == 2 and ".lock" in before
    with pytest.raises(RunKeyMismatch, match=r"sampling\.temperature: 0\.6 -> 0\.9"):
        run_cli(monkeypatch, *args, "temperature=0.9")
    assert tree(out) == before
    with pytest.raises(FileNotFoundError, match=r"controller=.*missing\.pt: no such file"):
        run_cli(monkeypatch, *args, "mode=adaptsoft", f"controller={tmp_path / 'missing.pt'}")
    assert tree(out) == before
    holder = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(out)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(DirLockedError, match=f"in use by pid {holder.pid} "):
            run_cli(monkeypatch, *args, "model.name=other")  # same key: refused by the lock only
        assert tree(out) == {**before, ".lock": tree(out)[".lock"]}  # the holder wrote its pid
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    assert (out / ".lock").read_bytes().startswith(f"pid {holder.pid} ".encode())
    (out / ".lock").write_bytes(b"")  # as a finished run leaves it
    run_cli(monkeypatch, *args)  # finished: nothing is redone, no file changes
    assert tree(out) == before
    # a refused run into a new directory creates none, and nothing lands in the working directory
    for refused in (["mode=adaptsoft", f"controller={tmp_path / 'missing.pt'}"],
                    ["benchmarks=[omnispatail]"], ["task_types=[Perspective]"]):
        with pytest.raises((FileNotFoundError, ValueError)):
            run_cli(monkeypatch, *args, f"output_dir={tmp_path / 'new'}", *refused)
        assert not (tmp_path / "new").exists()
    assert tree(cwd) == {}


def test_an_unknown_benchmark_name_lists_the_valid_ones(fixture_set, tiny_qwen3_vl_small, tmp_path):
    with pytest.raises(ValueError, match=r"unknown benchmark 'omnispatail'; the valid ones are "
                                         r"omnispatial, spatialab, mindcube"):
        make_cfg(fixture_set, tiny_qwen3_vl_small, tmp_path, benchmarks="[omnispatail,mindcube]")
    one = make_cfg(fixture_set, tiny_qwen3_vl_small, tmp_path, benchmarks="mindcube")  # not a list
    assert one.benchmarks == ["mindcube"]


def test_bad_settings_are_refused_before_the_output_folder_or_the_model(fixture_set, tiny_qwen3_vl_small,
                                                                         tmp_path):
    """Issue 55 items 12, 13, 16: K beyond the vocabulary (the eval created its output folder and
    loaded the model first), batch_rows below 1 (accepted: one question per batch) and an
    output_dir that is a file (a FileExistsError from the lock code): each refused in one line
    naming the setting, nothing written."""
    from soft_spatial.eval import evaluate
    from soft_spatial.infra.dirlock import NotADirectoryOutput
    out = tmp_path / "out"
    with pytest.raises(ValueError, match=r"^soft_thinking\.top_k=577 is more than the vocabulary of "
                                         r"model\.path=.* \(576 tokens"):
        make_cfg(fixture_set, tiny_qwen3_vl_small, out, **{"soft_thinking.top_k": 577})
    make_cfg(fixture_set, tiny_qwen3_vl_small, out, **{"soft_thinking.top_k": 576})  # every token
    for rows in (0, -1):
        with pytest.raises(ValueError, match=rf"^batch_rows must be >= 1 .*got {rows}$"):
            make_cfg(fixture_set, tiny_qwen3_vl_small, out, batch_rows=rows)
    assert not out.exists()
    afile = tmp_path / "results"
    afile.write_text("mine\n")
    for target in (afile, afile / "sub"):
        with pytest.raises(NotADirectoryOutput, match=rf"^output_dir={target} .*existing file, not a "
                                                      r"directory: choose another output_dir"):
            evaluate(small(fixture_set, tiny_qwen3_vl_small, target), engine=NoEngine(), progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results"] and afile.read_text() == "mine\n"


def test_an_output_dir_inside_the_model_directory_is_refused_up_front(fixture_set, tiny_qwen3_vl_small,
                                                                      tmp_path):
    """Issue 55 item 4: the model's fingerprint covered the evaluation's own rows, so its second
    run was refused with a traceback blaming the model. Refused before anything is written."""
    from soft_spatial.eval import evaluate
    model = shutil.copytree(tiny_qwen3_vl_small, tmp_path / "model")
    before = tree(model)
    for out in (model / "eval", model):
        cfg = small(fixture_set, model, out, max_new_tokens=2, limit=1)
        with pytest.raises(ValueError, match=rf"output_dir={out} lies inside model\.path={model}: .* "
                                             r"choose an output_dir outside the model directory"):
            evaluate(cfg, progress=False)
        assert tree(model) == before
