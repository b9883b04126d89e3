"""The evaluation's tables and summaries (`soft_spatial.eval.report`): accuracies per category and
their sample-weighted average, the columns in the benchmark's order, and cells that say over how
many questions they average when some were skipped."""
import json

import pytest

from eval_helpers import TooLong, small
from soft_spatial.engines import LocalEngine
from soft_spatial.eval import evaluate, read_results, summarize


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


def cell(table, column):
    """Our row's cell under ``column`` of a Markdown table."""
    head, _, ours = table.split("\n\n", 1)[1].splitlines()[:3]
    names = [c.strip() for c in head.strip("|").split("|")]
    return [c.strip() for c in ours.strip("|").split("|")][names.index(column)]


def test_the_table_says_over_how_many_questions_a_cell_averages(fixture_set, tiny_qwen3_vl_small,
                                                               tmp_path):
    from soft_spatial.data import load_benchmark
    records = load_benchmark("omnispatial", fixture_set.omnispatial)[:4]
    engine = LocalEngine.from_pretrained(tiny_qwen3_vl_small)
    cfg = small(fixture_set, tiny_qwen3_vl_small, tmp_path / "out", limit=4, samples=2)
    s = evaluate(cfg, engine=TooLong(engine, [records[1].question]), progress=False)["omnispatial"]
    rows = read_results(tmp_path / "out" / "samples.jsonl")
    table = (tmp_path / "out" / "omnispatial.md").read_text()
    acc = 100 * sum(r["correct"] for r in rows) / len(rows)
    assert len(rows) == 6 and s["questions"] == 3
    assert cell(table, "Avg.") == f"{acc:.2f} (n=3 of 4; 1 skipped: prompt too long)"
    sub = records[1].subcategory.replace("_", " ")
    asked = sum(r.subcategory == records[1].subcategory for r in records)
    assert cell(table, sub).endswith(f" (n={asked - 1} of {asked}; 1 skipped: prompt too long)")
    assert json.loads((tmp_path / "out" / "summary.json").read_text())["benchmarks"][
        "omnispatial"]["requested"]["skipped_overlong"] == 1
    # every question answered: plain numbers
    full = small(fixture_set, tiny_qwen3_vl_small, tmp_path / "full", limit=4, samples=2)
    evaluate(full, engine=engine, progress=False)
    assert "n=" not in (tmp_path / "full" / "omnispatial.md").read_text()


def test_a_category_whose_questions_were_all_skipped_keeps_its_column(fixture_set, tiny_qwen3_vl_small,
                                                                      tmp_path):
    from soft_spatial.data import load_benchmark
    records = load_benchmark("mindcube", fixture_set.mindcube)
    rotation = [r for r in records if r.category == "rotation"]
    among = [r for r in records if r.category == "among"]
    assert len(rotation) == 1 and len(among) == 2
    engine = TooLong(LocalEngine.from_pretrained(tiny_qwen3_vl_small),
                     [rotation[0].question, among[0].question])
    out = tmp_path / "out"
    s = evaluate(small(fixture_set, tiny_qwen3_vl_small, out, benchmarks="[mindcube]", limit="null"),
                 engine=engine, progress=False)["mindcube"]
    table = (out / "mindcube.md").read_text()
    head = table.split("\n\n", 1)[1].splitlines()[0]
    assert head == "| Model | among | around | rotation | translation | Overall |"
    assert cell(table, "rotation") == "– (n=0 of 1; 1 skipped: prompt too long)"
    rows = [r for r in read_results(out / "samples.jsonl") if r["category"] == "among"]
    assert len(rows) == 1
    assert cell(table, "among") == f"{100 * rows[0]['correct']:.2f} (n=1 of 2; 1 skipped: prompt too long)"
    assert "(n=" not in cell(table, "around")
    # accuracy over the answered samples only (skipped questions are not counted as wrong)
    assert s["categories"]["among"] == {"accuracy": 100.0 * rows[0]["correct"], "samples": 1,
                                        "questions": 1}
    summary = json.loads((out / "summary.json").read_text())["benchmarks"]["mindcube"]
    assert summary["requested"]["skipped_categories"] == {"among": 1, "rotation": 1}
    assert summary["requested"]["categories"]["rotation"] == 1
    assert table.rstrip().endswith("; skipped (prompt too long): among 1, rotation 1")
