"""python -m soft_spatial.ablation: the Table 4 sweep (rows, commands, table layout, resume)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from soft_spatial.lab.paper.ablation import load_sweep, main, row_result, table_markdown

ROOT = Path(__file__).resolve().parents[3]


def test_table4_config_has_the_five_rows_on_perspective_taking():
    sweep = load_sweep()
    assert [r.experiment for r in sweep.rows] == ["adaptsoft", "no_hidden", "no_entropy",
                                                  "no_alignment", "no_centering"]
    assert sweep.task_types == ["Perspective_Taking"] and sweep.benchmark == "omnispatial"
    assert sweep.columns == ["Egocentric", "Allocentric", "Hypothetical"]


def test_dry_run_commands(tmp_path, capsys):
    main(["--dry-run", "--out", str(tmp_path), "--override", "model=tiny",
          "--train-override", "trainer.total_training_steps=3", "--eval-override", "samples=2"])
    out = capsys.readouterr().out
    for exp in ("adaptsoft", "no_hidden", "no_entropy", "no_alignment", "no_centering"):
        train = next(line for line in out.splitlines() if f"experiment={exp} " in line)
        assert "-m soft_spatial.train model=tiny trainer.total_training_steps=3" in train
        assert "data.task_types=[Perspective_Taking]" in train
        assert f"trainer.default_local_dir={tmp_path / exp / 'train'}" in train
        ev = next(line for line in out.splitlines()
                  if f"output_dir={tmp_path / exp / 'eval'}" in line)
        assert "task_types=[Perspective_Taking]" in ev and "mode=adaptsoft" in ev
        assert f"model.path={tmp_path / exp / 'model'}" in ev and "samples=2" in ev
        assert f"controller={tmp_path / exp / 'train'}" in ev
    assert out.count("-m verl.model_merger merge") == 5
    assert not any(tmp_path.iterdir())  # nothing ran


def _summary(path, ego, allo, hypo, n=(10, 6, 4)):
    subs = {"Egocentric": ego, "Allocentric": allo, "Hypothetical": hypo}
    overall = sum(a * k for a, k in zip(subs.values(), n)) / sum(n)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"benchmarks": {"omnispatial": {
        "overall": overall, "samples": sum(n),
        "subcategories": {k: {"accuracy": v, "samples": m} for (k, v), m in zip(subs.items(), n)}}}}))
    return overall


def test_table_in_paper_layout_with_paper_numbers(tmp_path, capsys):
    cfg = tmp_path / "t4.yaml"
    text = (ROOT / "configs" / "ablation" / "table4.yaml").read_text()
    cfg.write_text(text.replace("{avg: null, Egocentric: null, Allocentric: null, Hypothetical: "
                                "null}}\n  - {key: no_hidden",
                                "{avg: 48.1, Egocentric: 50.0, Allocentric: null, Hypothetical: "
                                "40.25}}\n  - {key: no_hidden", 1))
    avg = _summary(tmp_path / "out" / "adaptsoft" / "eval" / "summary.json", 60.0, 50.0, 25.0)
    path = main(["--table-only", "--config", str(cfg), "--out", str(tmp_path / "out")])
    lines = path.read_text().splitlines()
    assert lines[2] == "| Method | Avg. | Egocentric | Allocentric | Hypothetical |"
    assert lines[4] == (f"| AdaptSoft (full) | {avg:.2f} (48.10) | 60.00 (50.00) | 50.00 (–) "
                        f"| 25.00 (40.25) |")
    assert lines[5] == "| w/o hidden state | – (–) | – (–) | – (–) | – (–) |"
    assert len([x for x in lines if x.startswith("| w")]) == 4
    saved = json.loads((tmp_path / "out" / "table4.json").read_text())
    assert saved["rows"]["adaptsoft"]["ours"]["avg"] == pytest.approx(avg)
    assert saved["rows"]["adaptsoft"]["paper"]["Hypothetical"] == 40.25


def test_bad_config_and_rows_are_clear_errors(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("benchmark: omnispatial\ntask_types: [Perspective_Taking]\ncolumns: [Egocentric]\n"
                   "rows:\n  - {key: a, name: A, experiment: nonexistent}\n")
    with pytest.raises(ValueError, match=r"bad.yaml: rows\[0\]: experiment 'nonexistent'"):
        load_sweep(bad)
    bad.write_text("benchmark: omnispatial\ncolumns: [Egocentric]\nrows: []\n")
    with pytest.raises(ValueError, match="bad.yaml: missing field 'rows'"):
        load_sweep(bad)
    with pytest.raises(SystemExit, match="unknown.*'nope'"):
        main(["--dry-run", "--rows", "nope", "--out", str(tmp_path)])
    (tmp_path / "x" / "summary.json").parent.mkdir()
    (tmp_path / "x" / "summary.json").write_text(json.dumps({"benchmarks": {}}))
    with pytest.raises(ValueError, match="no results for benchmark 'omnispatial'"):
        row_result(tmp_path / "x" / "summary.json", load_sweep())
    assert "Avg." in table_markdown(load_sweep(), {})


def test_a_row_trained_under_other_settings_is_refused_before_anything_runs(
        tiny_qwen3_vl_small, train_parquet, tmp_path, monkeypatch):
    """Issue 55 item 1: the sweep skipped a row's training whenever a bare train.done existed, so a
    re-run with more steps, another base model or other data merged and evaluated the old
    checkpoint under the new settings. train.done holds the row's key; another one is refused
    naming each difference, before any stage of any row runs. The stages' commands are replaced
    by stand-ins that write what the real ones leave."""
    import shutil

    from soft_spatial.lab.paper import ablation
    calls = []

    def stand_in(cmd, log, what, env=None):
        calls.append(what)
        args = dict(a.split("=", 1) for a in cmd if "=" in a and not a.startswith("-"))
        if what.endswith("training"):
            run = Path(args["trainer.default_local_dir"])
            steps = args["trainer.total_training_steps"]
            (run / f"global_step_{steps}" / "actor").mkdir(parents=True, exist_ok=True)
            (run / "latest_checkpointed_iteration.txt").write_text(steps)
        elif what.endswith("evaluation"):
            _summary(Path(args["output_dir"]) / "summary.json", 50.0, 50.0, 50.0)
    monkeypatch.setattr(ablation, "_run", stand_in)
    cfg = tmp_path / "sweep.yaml"
    cfg.write_text("benchmark: omnispatial\ntask_types: [Perspective_Taking]\ncolumns: [Egocentric]\n"
                   "rows:\n  - {key: fixed, name: fixed tau, experiment: soft_fixed}\n")
    out = tmp_path / "t4"

    def sweep(*train, model=tiny_qwen3_vl_small):
        return main(["--out", str(out), "--config", str(cfg), "--override", "model=tiny",
                     "--train-override", f"model.path={model}",
                     "--train-override", f"data.train_files={train_parquet}",
                     "--train-override", f"data.val_files={train_parquet}",
                     "--train-override", "trainer.total_training_steps=2",
                     *[x for o in train for x in ("--train-override", o)]])

    sweep()
    assert calls == ["fixed: training", "fixed: merging", "fixed: evaluation"]
    calls.clear()
    sweep()  # the same settings: trained already
    assert calls == ["fixed: evaluation"]
    other = Path(shutil.copytree(tiny_qwen3_vl_small, tmp_path / "other"))
    weights = next(other.glob("*.safetensors"))
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF  # other weights, the same architecture
    weights.write_bytes(bytes(data))
    before = {p: p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}
    calls.clear()
    for train, named, model in (
            (["trainer.total_training_steps=3", "actor_rollout_ref.actor.optim.lr=3e-4"],
             r"trainer\.total_training_steps: 2 -> 3\n.*actor_rollout_ref\.actor\.optim\.lr: [0-9.e-]+ -> 0\.0003",
             tiny_qwen3_vl_small),
            ([], r"inputs\.model\.fingerprint: ", other)):
        with pytest.raises(SystemExit, match=f"(?s)^python -m soft_spatial.ablation: fixed: the training in "
                                             f"{out / 'fixed'} was made with other settings.*{named}"):
            sweep(*train, model=model)
    (out / "fixed" / "train.done").write_text("ok\n")  # an earlier version's bare marker
    with pytest.raises(SystemExit, match="(?s)train.done holds no key .* remove .*fixed to train the row again"):
        sweep()
    assert calls == [] and {p: p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()} == {
        **before, out / "fixed" / "train.done": b"ok\n"}
    afile = tmp_path / "afile"
    afile.write_text("x")
    with pytest.raises(SystemExit, match=f"--out {afile} is an existing file"):
        main(["--out", str(afile), "--table-only"])


@pytest.mark.slow
def test_one_row_end_to_end_on_the_tiny_model(tiny_qwen3_vl_small, tmp_path, monkeypatch, capsys):
    """Train a row on a task-type subset (1 step, verl on the CPU), merge, evaluate on that subset,
    write the table; a second invocation skips training and merging. (The train fixture has one
    Perspective_Taking question, so the subset adds Dynamic_Reasoning to fill a batch of two.) The
    row trains the soft_fixed preset, end to end here only (Soft Thinking's fixed τ, no controller:
    the rollout, checkpoint, export and evaluation without one); Table 4's own rows change the
    controller's inputs or its update only, and run through the real actor update in
    tests/actor/test_adaptsoft_trainer.py."""
    from train_helpers import assert_one_step, prepare_train_data

    data = prepare_train_data(tmp_path / "data", tiny_qwen3_vl_small)
    cfg = tmp_path / "sweep.yaml"
    cfg.write_text("benchmark: omnispatial\ntask_types: [Perspective_Taking, Dynamic_Reasoning]\n"
                   "columns: [Egocentric, Manipulation]\n"
                   "rows:\n  - {key: fixed, name: fixed tau, experiment: soft_fixed,"
                   " paper: {avg: 50.0}}\n")
    out = tmp_path / "t4"
    args = [sys.executable, "-m", "soft_spatial.ablation", "--out", str(out), "--config", str(cfg),
            "--override", "model=tiny",
            "--train-override", "cluster=cpu", "--train-override", f"model.path={tiny_qwen3_vl_small}",
            "--train-override", f"data.train_files={data / 'train.parquet'}",
            "--train-override", f"data.val_files={data / 'test.parquet'}",
            "--train-override", "trainer.total_training_steps=1",
            "--train-override", "trainer.save_freq=1", "--train-override", "trainer.n_gpus_per_node=1",
            "--train-override", f"reward.custom_reward_function.path={ROOT / 'tests' / 'support' / 'smoke_reward.py'}",
            "--eval-override", f"data.omnispatial={data / 'fixtures' / 'omnispatial'}",
            "--eval-override", "samples=2", "--eval-override", "max_new_tokens=12"]
    env = dict(os.environ, HF_HUB_OFFLINE="1", RAY_USAGE_STATS_ENABLED="0")
    res = subprocess.run(args, capture_output=True, text=True, timeout=1200, env=env, cwd=ROOT)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    train_log = (out / "fixed" / "train.log").read_text()
    assert "data.task_types=['Perspective_Taking', 'Dynamic_Reasoning']: 3 rows" in train_log
    (metrics,) = [json.loads(x)["data"] for x in (out / "fixed" / "train" / "metrics.jsonl").read_text().splitlines()]
    assert_one_step(metrics, "soft_fixed")
    rows = [json.loads(x) for x in (out / "fixed" / "eval" / "samples.jsonl").read_text().splitlines()]
    assert len(rows) == 10 and {r["category"] for r in rows} == {"Perspective_Taking",
                                                                 "Dynamic_Reasoning"}
    summary = json.loads((out / "fixed" / "eval" / "summary.json").read_text())
    assert summary["config"]["mode"] == "fixed" and summary["config"]["controller"] is None
    table = (out / "table4.md").read_text()
    assert "| Method | Avg. | Egocentric | Manipulation |" in table
    assert f"| fixed tau | {summary['benchmarks']['omnispatial']['overall']:.2f} (50.00) |" in table
    # the second invocation: the command's main in this process (the first ran the command itself)
    assert args[1:3] == ["-m", "soft_spatial.ablation"]
    for var in ("HF_HUB_OFFLINE", "RAY_USAGE_STATS_ENABLED"):
        monkeypatch.setenv(var, env[var])
    monkeypatch.chdir(ROOT)
    capsys.readouterr()
    assert main(args[3:]) == out / "table4.md"  # no SystemExit: exit 0
    again = capsys.readouterr().out
    assert "training (" not in again and "merging" not in again
