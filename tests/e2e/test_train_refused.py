"""A refused or finished training command changes nothing (issue 34, item 11): Hydra writes no
``hydra/`` record and makes no run directory before the checks pass; an accepted run gets its
record under ``<run>/hydra/<time>/``. Each command is the real ``soft_spatial.train`` CLI (Hydra
included) in a child process; the accepted one has verl's trainer and Ray replaced by a print. The
refusals of later checks (task-type subsets: issue 44) call the same ``run`` in this process, with
Ray replaced by a failure (no new interpreter per case). A refusal by the soft settings and a
finished run's note come before torch and verl are imported (the command answers in about 2 s of
CPU, not 7-9)."""
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]

# the real entry point; STUB_VERL=1: the run stops where Ray and verl's trainer would start
CHILD = """
import atexit, os, sys
# what the command imported, said last (refused before the actor's check, or finished: neither)
atexit.register(lambda: print("heavy imports:", [m for m in ("torch", "verl") if m in sys.modules], file=sys.stderr))
import soft_spatial.train as t
if os.environ.get("STUB_VERL"):
    t.runtime_env = lambda cfg, env: None
    t.run_verl = lambda cfg: print("verl would train here")
sys.argv = ["soft_spatial.train"] + sys.argv[1:]
t.main()
"""


@pytest.fixture(scope="module")
def parquet(tmp_path_factory, tiny_qwen3_vl_small):
    from train_helpers import prepare_train_data
    return prepare_train_data(tmp_path_factory.mktemp("data"), tiny_qwen3_vl_small)


def _train(cwd, model, data, run_dir, *overrides, stub=False):
    env = {k: v for k, v in os.environ.items() if k != "VERL_FILE_LOGGER_PATH"}
    env.update(HF_HUB_OFFLINE="1", RAY_USAGE_STATS_ENABLED="0", TOKENIZERS_PARALLELISM="false",
               PYTHONPATH=str(ROOT) + os.pathsep + env.get("PYTHONPATH", ""))
    if stub:
        env["STUB_VERL"] = "1"
    cwd.mkdir(parents=True, exist_ok=True)
    return subprocess.run(
        [sys.executable, "-c", CHILD, "model=tiny", "cluster=cpu", f"model.path={model}",
         f"data.train_files={data / 'train.parquet'}", f"data.val_files={data / 'test.parquet'}",
         f"trainer.default_local_dir={run_dir}", *overrides],
        capture_output=True, text=True, timeout=300, cwd=cwd, env=env)


def _tree(path: Path) -> dict:
    """Every entry under ``path`` (directories too) with the bytes of each file."""
    return {str(p.relative_to(path)): (p.read_bytes() if p.is_file() else None)
            for p in sorted(path.rglob("*"))}


def test_a_refused_training_command_creates_no_run_directory(tiny_qwen3_vl_small, parquet, tmp_path):
    run_dir, cwd = tmp_path / "runs" / "new", tmp_path / "cwd"
    res = _train(cwd, tiny_qwen3_vl_small, parquet, run_dir, "soft_thinking.top_k=0")
    assert res.returncode != 0 and "top_k" in res.stderr, res.stderr[-3000:]
    # refused before torch and verl were imported (seconds, not their import's)
    assert res.stderr.strip().splitlines()[-1] == "heavy imports: []", res.stderr[-3000:]
    assert not (tmp_path / "runs").exists()  # neither the run directory nor Hydra's record
    assert _tree(cwd) == {}  # nor Hydra's outputs/ or a log where the command ran


def test_a_finished_run_re_run_changes_no_byte(tiny_qwen3_vl_small, parquet, tmp_path):
    run_dir, cwd = tmp_path / "run", tmp_path / "cwd"
    (run_dir / "global_step_3").mkdir(parents=True)
    (run_dir / "latest_checkpointed_iteration.txt").write_text("3")
    (run_dir / "metrics.jsonl").write_text("".join(f'{{"step": {s}, "x": 1}}\n' for s in (1, 2, 3)))
    before = _tree(run_dir)
    res = _train(cwd, tiny_qwen3_vl_small, parquet, run_dir, "trainer.total_training_steps=3",
                 stub=True)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "finished: the latest checkpoint is step 3" in res.stdout
    assert "verl would train here" not in res.stdout
    assert res.stderr.strip().splitlines()[-1] == "heavy imports: []", res.stderr[-3000:]  # told in seconds
    assert _tree(run_dir) == before  # not even a lock file or a hydra/ directory
    assert _tree(cwd) == {}


def test_an_accepted_run_keeps_hydras_record_under_the_run_directory(tiny_qwen3_vl_small, parquet,
                                                                     tmp_path):
    run_dir, cwd = tmp_path / "run", tmp_path / "cwd"
    res = _train(cwd, tiny_qwen3_vl_small, parquet, run_dir, "soft_thinking.top_k=3", stub=True)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "verl would train here" in res.stdout
    assert _tree(cwd) == {}
    (record,) = (run_dir / "hydra").iterdir()  # one per command: hydra/<date>_<time>/
    assert sorted(p.name for p in record.iterdir()) == ["config.yaml", "hydra.yaml", "overrides.yaml"]
    assert "soft_thinking.top_k=3" in yaml.safe_load((record / "overrides.yaml").read_text())
    assert yaml.safe_load((record / "config.yaml").read_text())["soft_thinking"]["top_k"] == 3
    assert "hydra" in yaml.safe_load((record / "hydra.yaml").read_text())


@pytest.mark.parametrize("override, message", [
    ("data.task_types=[Nope]", r"no records of task type \['Nope'\]"),
    # one Perspective_Taking row in the fixture's training split, a batch of 2 (the CPU preset)
    ("data.task_types=[Perspective_Taking]", r"data.task_types=\['Perspective_Taking'\]: 1 train rows, fewer than 2"),
])
def test_a_refused_task_type_subset_writes_nothing(override, message, tiny_qwen3_vl_small, parquet, tmp_path,
                                                   monkeypatch):
    """The subset was checked inside the locked run directory: a refusal left it with its ``.lock``
    (and, for a subset smaller than the batch, the subset's parquet)."""
    import soft_spatial.train as train
    from train_helpers import compose_train

    def no_ray(*args):
        raise AssertionError("a refused run reached Ray")
    monkeypatch.setattr(train, "runtime_env", no_ray)
    monkeypatch.setattr(train, "run_verl", no_ray)
    run_dir = tmp_path / "runs" / "new"
    cfg = compose_train("model=tiny", "cluster=cpu", f"model.path={tiny_qwen3_vl_small}",
                        f"data.train_files={parquet / 'train.parquet'}", f"data.val_files={parquet / 'test.parquet'}",
                        f"trainer.default_local_dir={run_dir}", override)
    env = dict(os.environ)
    try:
        with pytest.raises(ValueError, match=message):
            train.run(cfg)
    finally:  # run() exports the plugin environment
        os.environ.clear()
        os.environ.update(env)
    assert not (tmp_path / "runs").exists()
