"""python -m soft_spatial.eval: end to end on the fixtures, resume, aggregation."""
import json
import subprocess
import sys

import pytest
from hydra import compose, initialize_config_dir

from soft_spatial.data.fixtures import write_fixtures
from soft_spatial.engines import LocalEngine
from soft_spatial.eval import evaluate, read_results, summarize
from soft_spatial.eval.__main__ import CONFIG_DIR, build_config


@pytest.fixture(scope="module")
def fixtures(tmp_path_factory):
    return write_fixtures(tmp_path_factory.mktemp("fixtures"))


def make_cfg(fixtures, model, out, **over):
    overrides = [f"data.omnispatial={fixtures.omnispatial}", f"data.mindcube={fixtures.mindcube}",
                 f"data.spatialab={fixtures.spatialab / 'spatialab.parquet'}",
                 f"model.path={model}", f"output_dir={out}", "mode=fixed", "samples=2",
                 "max_new_tokens=12"] + [f"{k}={v}" for k, v in over.items()]
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
        return build_config(compose(config_name="eval", overrides=overrides))


def test_eval_runs_on_every_fixture_benchmark(fixtures, tiny_qwen3_vl_small, tmp_path):
    cfg = make_cfg(fixtures, tiny_qwen3_vl_small, tmp_path / "out",
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


class Interrupting:
    """Engine wrapper that dies after `after` generate calls (a crash mid-run)."""

    def __init__(self, engine, after):
        self.engine, self.after, self.prompts_seen = engine, after, 0

    def generate(self, prompts, **kw):
        if self.after == 0:
            raise KeyboardInterrupt
        self.after -= 1
        self.prompts_seen += len(prompts)
        return self.engine.generate(prompts, **kw)


def test_interrupted_run_resumes_without_redoing_samples(fixtures, tiny_qwen3_vl_small, tmp_path):
    cfg = make_cfg(fixtures, tiny_qwen3_vl_small, tmp_path / "a", batch_rows=4)  # 2 q per batch
    engine = LocalEngine.from_pretrained(tiny_qwen3_vl_small, max_batch_rows=4)
    crashing = Interrupting(engine, after=2)
    with pytest.raises(KeyboardInterrupt):
        evaluate(cfg, engine=crashing, progress=False)
    partial = read_results(tmp_path / "a" / "samples.jsonl")
    assert len(partial) == 8  # 2 batches × 2 questions × 2 samples were kept
    with open(tmp_path / "a" / "samples.jsonl", "a") as f:
        f.write('{"benchmark": "omnisp')  # torn line from the crash
    resumed = Interrupting(engine, after=100)
    evaluate(cfg, engine=resumed, progress=False)
    n_questions = len({r["question_index"] for r in read_results(tmp_path / "a" / "samples.jsonl")})
    assert resumed.prompts_seen == n_questions - 4  # finished questions were not regenerated
    # same rows as an uninterrupted run (per-question seeds make sampling order-independent)
    cfg_b = make_cfg(fixtures, tiny_qwen3_vl_small, tmp_path / "b", batch_rows=4)
    evaluate(cfg_b, engine=engine, progress=False)
    key = lambda r: (r["question_index"], r["sample"])  # noqa: E731
    a = sorted((r for r in read_results(tmp_path / "a" / "samples.jsonl")
                if r["benchmark"] == "omnispatial"), key=key)
    b = sorted(read_results(tmp_path / "b" / "samples.jsonl"), key=key)
    assert [(key(r), r["text"]) for r in a] == [(key(r), r["text"]) for r in b]


def test_weighted_average_equals_micro_accuracy_and_translation_excluded():
    rows = []
    spec = {"among": (3, 5), "around": (1, 4), "rotation": (0, 3), "translation": (2, 2)}
    for cat, (good, total) in spec.items():
        for i in range(total):
            rows.append({"benchmark": "mindcube", "question_index": len(rows), "sample": 0,
                         "category": cat, "subcategory": None, "correct": i < good,
                         "pred": "A", "finish_reason": "stop", "think_closed": True,
                         "tau_mean": 0.4})
    s = summarize(rows, "mindcube")
    assert s["categories"]["among"]["accuracy"] == pytest.approx(60.0)
    assert s["categories"]["translation"]["accuracy"] == pytest.approx(100.0)
    kept = [c for c in spec if c != "translation"]
    weighted = sum(s["categories"][c]["accuracy"] * s["categories"][c]["samples"]
                   for c in kept) / sum(s["categories"][c]["samples"] for c in kept)
    assert s["overall"] == pytest.approx(weighted) == pytest.approx(100 * 4 / 12)
    assert s["samples"] == 12 and s["no_answer_rate"] == 0.0


def test_cli_writes_outputs(fixtures, tiny_qwen3_vl_small, tmp_path):
    out = tmp_path / "cli"
    res = subprocess.run(
        [sys.executable, "-m", "soft_spatial.eval", "benchmarks=[mindcube]",
         f"data.mindcube={fixtures.mindcube}", f"model.path={tiny_qwen3_vl_small}",
         "mode=hard", "samples=1", "max_new_tokens=8", "limit=3", f"output_dir={out}"],
        capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "mindcube: overall" in res.stdout
    assert len(read_results(out / "samples.jsonl")) == 3
    assert (out / "mindcube.md").exists() and (out / "summary.json").exists()


def test_adaptsoft_without_controller_is_a_clear_error(fixtures, tiny_qwen3_vl_small, tmp_path):
    with pytest.raises(ValueError, match="controller"):
        make_cfg(fixtures, tiny_qwen3_vl_small, tmp_path, mode="adaptsoft")


class Recording:
    """Engine wrapper keeping every completion and the sampling settings it was called with."""

    def __init__(self, engine):
        self.engine, self.completions, self.samplings = engine, [], []

    def generate(self, prompts, **kw):
        outs = self.engine.generate(prompts, **kw)
        self.samplings.append(kw["sampling"])
        self.completions.extend(outs)
        return outs


def test_steps_jsonl_holds_every_step_of_every_sample(fixtures, tiny_qwen3_vl_small, tmp_path):
    from soft_spatial.eval.steps import read_steps

    cfg = make_cfg(fixtures, tiny_qwen3_vl_small, tmp_path / "s", limit=3)
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
def test_hard_mode_decodes_with_top_k(fixtures, tiny_qwen3_vl_small, tmp_path, monkeypatch,
                                      top_k):
    """Table 5: hard-mode evaluation samples every token from the top-5 (top_k=5, the default);
    top_k=0 samples from the full vocabulary (the random tiny model then leaves the top-5)."""
    import torch
    from engine_spy import capture_local

    steps, _ = capture_local(monkeypatch)
    cfg = make_cfg(fixtures, tiny_qwen3_vl_small, tmp_path / "h", mode="hard", limit=2,
                   max_new_tokens=16, top_k=top_k)
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


def test_task_type_subset_keeps_benchmark_indices(fixtures, tiny_qwen3_vl_small, tmp_path):
    cfg = make_cfg(fixtures, tiny_qwen3_vl_small, tmp_path / "t", samples=1,
                   task_types="[Perspective_Taking]")
    s = evaluate(cfg, progress=False)["omnispatial"]
    rows = read_results(tmp_path / "t" / "samples.jsonl")
    assert {r["category"] for r in rows} == {"Perspective_Taking"}
    assert sorted(r["question_index"] for r in rows) == [0, 1, 2]  # fixture positions
    assert s["questions"] == 3 and set(s["categories"]) == {"Perspective_Taking"}
    table = (tmp_path / "t" / "omnispatial.md").read_text()
    assert "| Egocentric | Allocentric | Hypothetical | Avg. |" in table
    bad = make_cfg(fixtures, tiny_qwen3_vl_small, tmp_path / "u", task_types="[Perspective]")
    with pytest.raises(ValueError, match=r"no records of task type \['Perspective'\].*Egocentric"):
        evaluate(bad, progress=False)


def test_omnispatial_table_lists_ten_subtypes_in_order_with_weighted_average():
    from soft_spatial.eval import markdown_table
    from soft_spatial.data.omnispatial import TAXONOMY

    order = [s for subs in TAXONOMY.values() for s in subs]
    spec = {s: (i % 3, 2 + i) for i, s in enumerate(order)}  # (correct, total) per sub-type
    rows = []
    for task, subs in TAXONOMY.items():
        for sub in subs:
            good, total = spec[sub]
            for j in range(total):
                rows.append({"benchmark": "omnispatial", "question_index": len(rows),
                             "sample": 0, "category": task, "subcategory": sub,
                             "correct": j < good, "pred": "A", "finish_reason": "stop",
                             "think_closed": True})
    s = summarize(rows, "omnispatial")
    table = markdown_table(s, "ours", [{"model": "paper", "source": "x", "overall": 49.68,
                                        "categories": {"Egocentric": 50.0}}])
    head, _, ours, paper = table.splitlines()[:4]
    assert head == "| Model | " + " | ".join(o.replace("_", " ") for o in order) + " | Avg. |"
    cells = [c.strip() for c in ours.strip("|").split("|")][1:]
    assert cells[:-1] == [f"{100 * g / t:.2f}" for g, t in (spec[o] for o in order)]
    avg = 100 * sum(g for g, _ in spec.values()) / sum(t for _, t in spec.values())
    assert cells[-1] == f"{avg:.2f}"  # sample-weighted average of the sub-types = micro overall
    assert paper.split("|")[order.index("Egocentric") + 2].strip() == "50.00"
