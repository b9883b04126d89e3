"""A run directory's resume step and metrics (soft_spatial/infra/run_dir.py): the step verl resumes
from (its tracker, ``resume_from_path``; refused, naming the file, where verl would silently start
over), the metrics kept up to the resumed checkpoint (the rest set aside, a torn line too), and the
one reader of ``metrics.jsonl`` (a step's lines merged, a bad line named by file and line).
(Training refusing a run that cannot resume as asked, before Ray: tests/test_train.py.)"""
import json
import os
import subprocess
import sys

import pytest

from soft_spatial.infra.run_dir import SUPERSEDED, keep_metrics_until, resume_step
from train_helpers import metrics_lines


def test_resume_path_names_a_missing_folder(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"trainer.resume_from_path=.*global_step_3: no such checkpoint"):
        resume_step(tmp_path, "resume_path", str(tmp_path / "global_step_3"))
    with pytest.raises(ValueError, match=r"resume_from_path=.../global_step_N, got '.*global_step_x'"):
        resume_step(tmp_path, "resume_path", str(tmp_path / "global_step_x"))


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
