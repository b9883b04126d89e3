"""The evaluation's loop (`soft_spatial.eval.runner`) on the fixture benchmarks: every benchmark,
resume after a crash without redoing a sample, one writer per directory, skipped prompts named,
every step recorded, hard-mode top-k, task-type subsets and a failed start that leaves nothing."""
import json
import os
import re
import shutil
import signal
import subprocess
import sys

import pytest

from eval_helpers import HOLD_LOCK, Interrupting, NoEngine, Recording, TooLong, make_cfg, small, tree
from soft_spatial.data import load_benchmark
from soft_spatial.engines import LocalEngine
from soft_spatial.eval import evaluate, read_results
from soft_spatial.eval.runkey import RunKeyMismatch
from soft_spatial.infra.dirlock import DirLockedError


def test_eval_runs_on_every_fixture_benchmark(fixture_set, tiny_qwen3_vl_small, tmp_path):
    cfg = make_cfg(fixture_set, tiny_qwen3_vl_small, tmp_path / "out",
                   benchmarks="[omnispatial,spatialab,mindcube]")
    summaries = evaluate(cfg, progress=False)
    rows = read_results(tmp_path / "out" / "samples.jsonl")
    for bench in ("omnispatial", "spatialab", "mindcube"):
        bench_rows = [r for r in rows if r["benchmark"] == bench]
        n_q = len({r["question_index"] for r in bench_rows})
        assert len(bench_rows) == 2 * n_q and n_q > 0
        assert (tmp_path / "out" / f"{bench}.md").read_text().startswith(f"## {bench}")
        s = summaries[bench]
        assert s["samples"] == sum(1 for r in bench_rows if r["category"] != "translation")
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["config"]["mode"] == "fixed" and summary["config"]["samples"] == 2
    r0 = rows[0]
    for key in ("text", "pred", "correct", "tau_mean", "finish_reason", "think_closed"):
        assert key in r0
    assert r0["tau_mean"] == pytest.approx(0.5)


def test_a_resumed_run_gives_exactly_the_rows_of_a_fresh_one(fixture_set, tiny_qwen3_vl_small, tmp_path):
    """A run killed mid-way (a torn last line too) and resumed redoes no finished sample and ends
    with the rows of an uninterrupted run, text for text, though a row's text depends on the rows
    decoded with it (`runkey`): each batch is cut where a fresh run cuts it. A question skipped as
    too long is retried alone, not at the head of the next batch (which shifted every batch after
    it: issue 55 item 5). Another limit into the same directory, which decoded other batches (1 of
    20 rows differed from a fresh run's), is refused naming it; so are samples and task_types."""
    over = dict(batch_rows=8, max_new_tokens=24)  # 4 questions of 2 samples per batch
    records = load_benchmark("omnispatial", fixture_set.omnispatial)
    engine = LocalEngine.from_pretrained(tiny_qwen3_vl_small, max_batch_rows=8)
    long = lambda e: TooLong(e, [records[1].question])  # noqa: E731
    crashing = Interrupting(long(engine), after=2)  # questions 0-3 (1 refused), then 0, 2, 3
    with pytest.raises(KeyboardInterrupt):
        evaluate(make_cfg(fixture_set, tiny_qwen3_vl_small, tmp_path / "a", **over), engine=crashing,
                 progress=False)
    assert len(read_results(tmp_path / "a" / "samples.jsonl")) == 6  # questions 0, 2, 3
    with open(tmp_path / "a" / "samples.jsonl", "a") as f:
        f.write('{"benchmark": "omnisp')  # torn line from the crash
    resumed = Interrupting(long(engine), after=100)
    evaluate(make_cfg(fixture_set, tiny_qwen3_vl_small, tmp_path / "a", **over), engine=resumed,
             progress=False)
    assert resumed.prompts_seen == 1 + 4 + 2  # question 1 alone, 4-7, 8-9: nothing redone
    evaluate(make_cfg(fixture_set, tiny_qwen3_vl_small, tmp_path / "b", **over), engine=long(engine),
             progress=False)
    key = lambda r: (r["question_index"], r["sample"])  # noqa: E731
    a, b = (sorted(read_results(tmp_path / d / "samples.jsonl"), key=key) for d in "ab")
    assert [(key(r), r["text"]) for r in a] == [(key(r), r["text"]) for r in b] and len(a) == 18
    rows = (tmp_path / "a" / "samples.jsonl").read_bytes()
    for change, named in (({"limit": 2}, "limit: None -> 2"), ({"samples": 3}, "samples: 2 -> 3"),
                          ({"task_types": "[Perspective_Taking]"}, "task_types: None -> ['Perspective_Taking']")):
        with pytest.raises(RunKeyMismatch, match=re.escape(named)):
            evaluate(make_cfg(fixture_set, tiny_qwen3_vl_small, tmp_path / "a", **over, **change),
                     engine=NoEngine(), progress=False)
    assert (tmp_path / "a" / "samples.jsonl").read_bytes() == rows


def test_a_second_writer_fails_at_once_naming_the_holder(fixture_set, tiny_qwen3_vl_small, tmp_path):
    out = tmp_path / "out"
    holder = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(out)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(DirLockedError, match=f"in use by pid {holder.pid} "):
            evaluate(small(fixture_set, tiny_qwen3_vl_small, out), engine=NoEngine(), progress=False)
        assert sorted(p.name for p in out.iterdir()) == [".lock"]  # the second run wrote nothing
    finally:
        holder.send_signal(signal.SIGKILL)  # the kernel releases a killed holder's lock
        holder.wait()
    evaluate(small(fixture_set, tiny_qwen3_vl_small, out), progress=False)
    assert len(read_results(out / "samples.jsonl")) == 2


def test_resume_appends_to_the_same_file(fixture_set, tiny_qwen3_vl_small, tmp_path):
    out = tmp_path / "out"
    engine = LocalEngine.from_pretrained(tiny_qwen3_vl_small)
    with pytest.raises(KeyboardInterrupt):  # killed after its first batch (one question each)
        evaluate(small(fixture_set, tiny_qwen3_vl_small, out, batch_rows=1),
                 engine=Interrupting(engine, after=1), progress=False)
    with open(out / "samples.jsonl", "a") as f:
        f.write('{"benchmark": "omnisp')  # torn line from a crash
    inode = os.stat(out / "samples.jsonl").st_ino
    evaluate(small(fixture_set, tiny_qwen3_vl_small, out, batch_rows=1), engine=engine, progress=False)
    assert os.stat(out / "samples.jsonl").st_ino == inode  # never replaced under a writer
    assert len(read_results(out / "samples.jsonl")) == 2


def test_an_overlong_prompt_is_skipped_and_named(fixture_set, tiny_qwen3_vl_small, tmp_path):
    records = load_benchmark("omnispatial", fixture_set.omnispatial)[:4]
    engine = TooLong(LocalEngine.from_pretrained(tiny_qwen3_vl_small), [records[1].question])
    s = evaluate(small(fixture_set, tiny_qwen3_vl_small, tmp_path / "out", limit=4, batch_rows=4),
                 engine=engine, progress=False)["omnispatial"]
    assert s["skipped_overlong"] == [records[1].key] and (s["questions"], s["samples"]) == (3, 3)
    rows = read_results(tmp_path / "out" / "samples.jsonl")
    assert sorted(r["question_key"] for r in rows) == sorted(r.key for r in records if r is not records[1])


def test_steps_jsonl_holds_every_step_of_every_sample(fixture_set, tiny_qwen3_vl_small, tmp_path):
    from soft_spatial.eval.steps import read_steps

    cfg = make_cfg(fixture_set, tiny_qwen3_vl_small, tmp_path / "s", limit=3)
    rec = Recording(LocalEngine.from_pretrained(tiny_qwen3_vl_small))
    evaluate(cfg, engine=rec, progress=False)
    steps = read_steps(tmp_path / "s" / "steps.jsonl")
    rows = {(r["benchmark"], r["question_index"], r["sample"]): r
            for r in read_results(tmp_path / "s" / "samples.jsonl")}
    assert set(steps) == set(rows) and len(rows) == 6
    by_text = {(o.text, len(o.token_ids)): o for o in rec.completions}
    for key, st in steps.items():
        o = by_text[(rows[key]["text"], rows[key]["num_tokens"])]
        tr = o.trace
        assert (st["token"] == tr.tokens.numpy()).all() and (st["soft"] == tr.soft.numpy()).all()
        assert (st["tau"] == tr.tau.numpy()).all() and (st["entropy"] == tr.entropy.numpy()).all()
        assert st["soft"].sum() == rows[key]["soft_steps"] > 0
        assert float(st["tau"][st["soft"]].mean()) == pytest.approx(rows[key]["tau_mean"])
    # a torn last line (crash mid-write) is dropped; a bad line elsewhere names file and line
    path = tmp_path / "s" / "steps.jsonl"
    with open(path, "a") as f:
        f.write('{"benchmark": "omni')
    assert set(read_steps(path)) == set(rows)
    lines = path.read_text().splitlines()
    path.write_text("\n".join(["{oops"] + lines[:-1]) + "\n")
    with pytest.raises(ValueError, match="steps.jsonl: line 1"):
        read_steps(path)


@pytest.mark.parametrize("top_k", [5, 0])
def test_hard_mode_decodes_with_top_k(fixture_set, tiny_qwen3_vl_small, tmp_path, monkeypatch,
                                      top_k):
    """Table 5: hard-mode evaluation samples every token from the top-5 (sample_top_k=5, the
    default); sample_top_k=0 samples from the full vocabulary (the random tiny model then leaves
    the top-5)."""
    import torch
    from engine_spy import capture_local

    steps, _ = capture_local(monkeypatch)
    cfg = make_cfg(fixture_set, tiny_qwen3_vl_small, tmp_path / "h", mode="hard", limit=2,
                   max_new_tokens=16, sample_top_k=top_k)
    evaluate(cfg, progress=False)
    ranks = []
    for logits, _, rec in steps:
        tok = rec["topk_ids"][:, 0]
        ranks.append((logits > logits.gather(-1, tok[:, None])).sum(-1))
    ranks = torch.cat(ranks)
    assert ranks.numel() > 20
    if top_k:
        assert (ranks < 5).all()
    else:
        assert (ranks >= 5).any()
    assert json.loads((tmp_path / "h" / "summary.json").read_text())["config"][
        "decode_top_k"] == top_k


def test_task_type_subset_keeps_benchmark_indices(fixture_set, tiny_qwen3_vl_small, tmp_path):
    cfg = make_cfg(fixture_set, tiny_qwen3_vl_small, tmp_path / "t", samples=1,
                   task_types="[Perspective_Taking]")
    s = evaluate(cfg, progress=False)["omnispatial"]
    rows = read_results(tmp_path / "t" / "samples.jsonl")
    assert {r["category"] for r in rows} == {"Perspective_Taking"}
    assert sorted(r["question_index"] for r in rows) == [0, 1, 2]  # fixture positions
    assert s["questions"] == 3 and set(s["categories"]) == {"Perspective_Taking"}
    table = (tmp_path / "t" / "omnispatial.md").read_text()
    assert "| Egocentric | Allocentric | Hypothetical | Avg. |" in table
    bad = make_cfg(fixture_set, tiny_qwen3_vl_small, tmp_path / "u", task_types="[Perspective]")
    with pytest.raises(ValueError, match=r"no records of task type \['Perspective'\].*Egocentric"):
        evaluate(bad, progress=False)


def test_a_record_the_loader_leaves_out_is_counted_in_the_summary_and_the_table(
        fixture_set, tiny_qwen3_vl_small, tmp_path, capsys):
    data = tmp_path / "spatialab"
    shutil.copytree(fixture_set.spatialab, data)
    table = data / "spatialab.jsonl"
    row = json.loads(table.read_text().splitlines()[0])
    row.update(id="count_3", options=["2", "3", "4", "5"], answer="3")  # option 3 is "4"; "3" is B
    table.write_text(table.read_text() + json.dumps(row) + "\n")
    out = tmp_path / "out"
    s = evaluate(small(fixture_set, tiny_qwen3_vl_small, out, benchmarks="[spatialab]",
                       **{"data.spatialab": table}), progress=False)["spatialab"]
    assert len(s["left_out"]) == 1 and "id 'count_3', field 'answer'" in s["left_out"][0]
    summary = json.loads((out / "summary.json").read_text())["benchmarks"]["spatialab"]
    assert summary["left_out"] == s["left_out"]
    assert "1 question(s) left out by the loader" in (out / "spatialab.md").read_text()
    assert f"warning: spatialab: {s['left_out'][0]}" in capsys.readouterr().err


def test_an_eval_that_fails_at_engine_start_leaves_a_directory_the_corrected_one_uses(
        fixture_set, tiny_qwen3_vl_small, tmp_path):
    from controller_helpers import trained_controller
    wrong, right = tmp_path / "wrong.pt", tmp_path / "right.pt"
    trained_controller(32).save(wrong)  # another hidden size than the model's 64
    trained_controller(64).save(right)
    out = tmp_path / "out"
    with pytest.raises(ValueError, match="hidden size 32"):
        evaluate(small(fixture_set, tiny_qwen3_vl_small, out, mode="adaptsoft", controller=wrong),
                 progress=False)
    with pytest.raises(ValueError, match="is more than the vocabulary"):  # K: refused before the engine
        evaluate(small(fixture_set, tiny_qwen3_vl_small, out, mode="adaptsoft", controller=right,
                       **{"soft_thinking.top_k": 1000}), progress=False)
    s = evaluate(small(fixture_set, tiny_qwen3_vl_small, out, mode="adaptsoft", controller=right),
                 progress=False)["omnispatial"]
    assert (s["questions"], s["samples"]) == (2, 2) and len(read_results(out / "samples.jsonl")) == 2
    key = json.loads((out / "run_key.json").read_text())
    assert key["controller"]["path"] == str(right.resolve()) and key["soft_thinking"]["top_k"] == 5
    # a directory that does hold results is still refused, and nothing changes
    before = tree(out)
    with pytest.raises(RunKeyMismatch, match="holds results of a different evaluation"):
        evaluate(small(fixture_set, tiny_qwen3_vl_small, out, mode="adaptsoft", controller=wrong),
                 engine=NoEngine(), progress=False)
    assert tree(out) == before
