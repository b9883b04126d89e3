"""The GPU kit's per-stage command (soft_spatial/bench/gpu/stages.py, run as scripts/gpu/check.py):
--help, and --dry-run, which runs each stage's logic at tiny sizes on the CPU: a (the embedded
engine, bench/gpu/embedded.py), b (softthink at real sizes, softthink_sizes.py), c (one actor
update through verl's FSDP2 engine, actor_update.py; slow); d and f now point at the headline
plan's jobs; e hands its spec to the plan's GRPO job (its code path runs end to end in the plan's
dry run: tests/sglang_real/test_gpu_headline_dry_run.py). On a GPU the same stages run at full
size."""
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


def _check(tmp_path, *args):
    out = tmp_path / "report.md"
    res = subprocess.run([sys.executable, str(ROOT / "scripts/gpu/check.py"), *args, "--out",
                          str(out)], capture_output=True, text=True, cwd=tmp_path)
    return res, (out.read_text() if out.exists() else "")


def test_check_help(tmp_path):
    res, _ = _check(tmp_path, "--help")
    assert res.returncode == 0 and "--dry-run" in res.stdout and "Stages" in res.stdout


def test_check_dry_run_engine_and_softthink_stages(tmp_path):
    res, report = _check(tmp_path, "--dry-run", "--stages", "a,b")
    assert res.returncode == 0, res.stderr[-3000:]
    assert "## a. Embedded engine" in report and "## b. softthink" in report
    assert report.count("**ok**") == 2
    res, _ = _check(tmp_path, "--dry-run", "--stages", "d")  # the plan's jobs now: said so
    assert res.returncode == 2 and "--plan headline --only D/references" in res.stderr
    assert "Greedy limit (float32): 2/2 prompts decode the same" in report
    assert "| adaptsoft |" in report and "| 256 |" in report  # throughput and alignment tables


def test_an_out_that_cannot_take_the_report_is_refused_before_the_first_stage(tmp_path, capsys):
    """Issue 55 item 10: the stage mode with --out an existing directory (the flag means a directory
    in plan mode) ran the whole stage, then crashed with IsADirectoryError: results lost,
    OUT.tmp left. Refused in one line before any stage, nothing written."""
    from soft_spatial.bench.gpu.stages import main
    (tmp_path / "dir").mkdir()
    (tmp_path / "afile").write_text("x")
    (tmp_path / "r.md.tmp").mkdir()
    (tmp_path / "stage-e").write_text("x")
    for out, stages, message in (
            (tmp_path / "dir", "b", f"--out {tmp_path / 'dir'} is an existing directory; the stage mode "
                                    "writes its report to a file"),
            (tmp_path / "afile" / "r.md", "b", f"--out {tmp_path / 'afile' / 'r.md'} lies under an existing file"),
            (tmp_path / "r.md", "b", f"{tmp_path / 'r.md.tmp'} is a directory"),
            (tmp_path / "e.md", "e", f"{tmp_path / 'stage-e'} is a file")):
        before = sorted(p.name for p in tmp_path.rglob("*"))
        with pytest.raises(SystemExit) as e:
            main(["--dry-run", "--stages", stages, "--out", str(out)])
        assert e.value.code == 2 and message in capsys.readouterr().err
        assert sorted(p.name for p in tmp_path.rglob("*")) == before


@pytest.mark.slow
def test_check_dry_run_actor_update_stage(tmp_path):
    res, report = _check(tmp_path, "--dry-run", "--stages", "c")
    assert res.returncode == 0, res.stderr[-3000:] + report
    assert "**ok**" in report
    for mode in ("hard", "soft_fixed", "adaptsoft"):
        assert f"| {mode} |" in report


def test_stage_c_times_each_mode_in_its_own_process_on_a_device():
    """Each mode's peak memory is its own only in a fresh process; a dry run (no memory measured)
    times all three in one, and the child refuses a mode it does not know, naming it."""
    from soft_spatial.bench.gpu.actor_update import MODES, main, process_groups

    assert process_groups(False) == [("hard",), ("soft_fixed",), ("adaptsoft",)]
    assert process_groups(True) == [MODES] and MODES[0] == "hard"
    with pytest.raises(SystemExit, match=r"unknown mode\(s\) \['sofft'\]"):
        main(["hard,sofft", "m", "b", "--dry-run"])


def test_stage_e_is_the_plans_grpo_job_with_a_resume(tmp_path, monkeypatch):
    """Stage e trains to step 1 with a checkpoint and resumes to step 2 through the plan's GRPO job
    (bf16, the tiny default init), within its timeout; a failed run's report is the stage's."""
    import time

    from soft_spatial.bench.gpu import grpo, stages
    from soft_spatial.bench.gpu.report import JobFailed, StageFailed

    seen = []

    def run(spec, out, work, dry, deadline_at):
        seen.append((spec, out, work, dry, deadline_at))
        if len(seen) == 2:
            raise JobFailed("sync", {"spec": spec})
        return {"spec": spec}

    monkeypatch.setattr(grpo, "run", run)
    monkeypatch.setattr(grpo, "render", lambda values: [f"rendered {sorted(values)}"])
    monkeypatch.setenv("SOFT_SPATIAL_STAGE_E_TIMEOUT", "60")

    class Ctx:
        report = type("R", (), {"path": tmp_path / "report.md"})()
        workdir, dry_run = tmp_path / "work", True

    before = time.time()
    assert stages.stage_e(Ctx()) == ["rendered ['spec']"]
    spec, out, work, dry, deadline = seen[0]
    assert spec == grpo.ESpec(dtype="bfloat16", weights="tiny", steps=2, resume=True)
    assert spec.runs() == [(1, True, [0, 1]), (2, False, [1, 2])]  # a checkpoint, then a resume
    assert (out, work, dry) == (tmp_path / "stage-e", tmp_path / "work" / "e", True)
    assert before + 60 <= deadline <= time.time() + 60
    with pytest.raises(StageFailed, match=r"rendered \['failure', 'spec'\]"):
        stages.stage_e(Ctx())
