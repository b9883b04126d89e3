"""python -m soft_spatial.analysis: the numbers of Figures 5–7 against direct computations on
files with known contents, the figures and the Fig. 4 page, errors for bad inputs."""
import json
import re

import numpy as np
import pytest
import torch

from soft_spatial.lab.paper.analysis.cli import main
from soft_spatial.eval.steps import steps_row
from soft_spatial.softthink import SoftTrace


def make_trace(tau, entropy, tokens, n_soft):
    n = len(tau)
    ids = torch.zeros(n, 3, dtype=torch.long)
    ids[:, 0] = torch.as_tensor(tokens)
    soft = torch.arange(n) < n_soft
    return SoftTrace(ids, torch.zeros(n, 3), torch.as_tensor(tau) * soft, torch.zeros(n),
                     torch.zeros(n, 9), torch.as_tensor(entropy) * soft, soft)


@pytest.fixture()
def eval_dir(tmp_path, tiny_qwen3_vl_small):
    """An evaluation directory with 12 traces: τ falls with Ĥ plus noise; lengths 6..50."""
    rng = np.random.default_rng(0)
    d = tmp_path / "eval"
    d.mkdir()
    samples, steps, truth = [], [], []
    for q in range(6):
        for s in range(2):
            n_soft = int(rng.integers(6, 50))
            n = n_soft + 3
            ent = rng.uniform(0, 1, n).astype(np.float32)
            tau = (0.7 - 0.4 * ent + 0.05 * rng.standard_normal(n)).astype(np.float32)
            tokens = rng.integers(0, 500, n)
            correct = (q + s) % 3 == 0
            tr = make_trace(tau, ent, tokens, n_soft)
            steps.append(steps_row("omnispatial", q, s, tr))
            samples.append({"benchmark": "omnispatial", "question_index": q, "sample": s,
                            "question_id": f"{q}_0", "category": "Perspective_Taking",
                            "subcategory": "Egocentric", "answer": "A",
                            "pred": "A" if correct else "B", "correct": correct,
                            "num_tokens": n, "soft_steps": n_soft, "text": "x"})
            truth.append((tau[:n_soft].astype(np.float64), ent[:n_soft].astype(np.float64),
                          correct))
    (d / "steps.jsonl").write_text("".join(json.dumps(r) + "\n" for r in steps))
    (d / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in samples))
    (d / "summary.json").write_text(json.dumps({"config": {"model": str(tiny_qwen3_vl_small)}}))
    return d, truth


def test_fig6_numbers_equal_direct_computation(eval_dir, tmp_path):
    d, truth = eval_dir
    res = main(["fig6", str(d), "--bins", "5", "--min-count", "10"])
    tau = np.concatenate([t for t, _, _ in truth])
    ent = np.concatenate([e for _, e, _ in truth])
    assert res["steps"] == tau.size
    assert res["r"] == pytest.approx(np.corrcoef(ent, tau)[0, 1], abs=1e-9)
    assert res["r"] < -0.8  # τ falls with entropy by construction
    for b in range(5):
        lo, hi = b / 5, (b + 1) / 5
        sel = (ent >= lo) & ((ent < hi) if b < 4 else (ent <= hi))
        assert res["count"][b] == sel.sum()
        assert res["median"][b] == pytest.approx(np.median(tau[sel]), abs=1e-9)
        assert res["p10"][b] == pytest.approx(np.percentile(tau[sel], 10), abs=1e-9)
    assert res["median_low"] == res["median"][0] > res["median_high"] == res["median"][-1]
    assert (d / "analysis" / "fig6_tau_entropy.png").stat().st_size > 5000
    saved = json.loads((d / "analysis" / "analysis.json").read_text())["fig6"]
    assert saved["r"] == res["r"]


def test_fig7_spreads_equal_direct_computation(eval_dir):
    d, truth = eval_dir
    res = main(["fig7", str(d), "--min-steps", "5"])["summary"]
    spread = lambda x: np.percentile(x, 90) - np.percentile(x, 10)  # noqa: E731
    within = [spread(t) for t, _, _ in truth]
    medians = [np.median(t) for t, _, _ in truth]
    assert res["all"]["traces"] == 12
    assert res["all"]["within"] == pytest.approx(np.mean(within), abs=1e-9)
    assert res["all"]["across"] == pytest.approx(spread(medians), abs=1e-9)
    ok = [i for i, (_, _, c) in enumerate(truth) if c]
    assert res["correct"]["traces"] == len(ok)
    assert res["correct"]["within"] == pytest.approx(np.mean([within[i] for i in ok]), abs=1e-9)
    assert res["incorrect"]["traces"] == 12 - len(ok)
    assert sum(res[g]["traces"] for g in ("short", "medium", "long")) == 12
    assert (d / "analysis" / "fig7_tau_spread.png").stat().st_size > 5000


def test_fig5_from_metrics(tmp_path):
    path = tmp_path / "run" / "metrics.jsonl"
    path.parent.mkdir()
    lines = [{"step": s, "data": {"soft/tau_mean": 0.5 - 0.01 * s, "soft/tau_min": 0.2 + 0.01 * s,
                                  "soft/tau_max": 0.8}} for s in (1, 2, 3)]
    lines.insert(1, {"step": 2, "data": {"val/score": 1.0}})  # a line without τ is skipped
    path.write_text("".join(json.dumps(x) + "\n" for x in lines) + '{"step": 4, "da')
    res = main(["fig5", str(path)])
    assert (res["steps"], res["first_step"], res["last_step"]) == (3, 1, 3)
    assert res["tau_mean_first"] == pytest.approx(0.49) and res["tau_mean_last"] == pytest.approx(0.47)
    assert (res["tau_min"], res["tau_max"]) == (pytest.approx(0.21), 0.8)
    assert (tmp_path / "run" / "analysis" / "fig5_tau_training.png").is_file()
    hard = tmp_path / "hard.jsonl"
    hard.write_text(json.dumps({"step": 1, "data": {"actor/pg_loss": 0.1}}) + "\n")
    with pytest.raises(ValueError, match="hard-mode run has no"):
        main(["fig5", str(hard)])


@pytest.mark.parametrize("line, problem", [
    ([1, 2], "not a metrics line of verl's file logger"),
    ({"step": 2, "data": 5}, "not a metrics line of verl's file logger"),
    ({"step": "2", "data": {}}, "not a metrics line of verl's file logger"),
    ({"soft/tau_mean": 0.5}, "not a metrics line of verl's file logger"),
    ({"step": 2, "data": {"soft/tau_mean": "high", "soft/tau_min": 0.1, "soft/tau_max": 0.9}},
     "step 2: 'soft/tau_mean' is 'high', not a number"),
])
def test_fig5_names_the_file_and_line_of_a_metrics_line_of_another_shape(tmp_path, line, problem):
    """A bare AttributeError or TypeError before (issue 44): now the file and the line."""
    path = tmp_path / "metrics.jsonl"
    good = {"step": 1, "data": {"soft/tau_mean": 0.5, "soft/tau_min": 0.2, "soft/tau_max": 0.8}}
    path.write_text("\n".join(json.dumps(x) for x in (good, {"step": 1, "data": {}}, line, good)) + "\n")
    with pytest.raises(ValueError, match=re.escape(f"{path}: line 3: ") + re.escape(problem)):
        main(["fig5", str(path)])


def test_fig4_page_shows_the_spine_shaded_by_tau(eval_dir, tiny_qwen3_vl_small):
    from soft_spatial.models.loading import load_processing

    d, truth = eval_dir
    res = main(["fig4", str(d), "--sample", "omnispatial:2:1"])
    page = (d / "analysis" / "fig4_trace.html").read_text()
    tok = load_processing(tiny_qwen3_vl_small)[2]
    steps = [json.loads(x) for x in (d / "steps.jsonl").read_text().splitlines()]
    from soft_spatial.eval.steps import decode_steps
    st = decode_steps(next(r for r in steps if (r["question_index"], r["sample"]) == (2, 1)))
    n_soft = int(st["soft"].sum())
    assert page.count('title="step ') == st["tau"].size
    assert page.count("τ = ") == n_soft and page.count('class="discrete"') == st["tau"].size - n_soft
    assert f'title="step 0: τ = {st["tau"][0]:.3f}' in page
    assert "data:image/png;base64," in page and res["sample"] == "omnispatial:2:1"
    import html
    import re
    text = html.unescape(re.sub(r"<[^>]+>", "", page.split('<div class="trace">')[1]
                                .split("</div>")[0]))
    assert text == tok.decode(st["token"].tolist())  # the pieces spell the spine text
    with pytest.raises(ValueError, match="no sample 'omnispatial:9:9'"):
        main(["fig4", str(d), "--sample", "omnispatial:9:9"])


def test_bad_inputs_are_clear_errors(tmp_path, eval_dir):
    with pytest.raises(FileNotFoundError, match="not an evaluation directory"):
        main(["fig6", str(tmp_path)])
    d, _ = eval_dir
    with pytest.raises(ValueError, match="no samples of benchmark 'mindcube'"):
        main(["fig6", str(d), "--benchmark", "mindcube"])
    rows = (d / "samples.jsonl").read_text().splitlines()
    bad = json.loads(rows[0])
    del bad["correct"]
    (d / "samples.jsonl").write_text("\n".join([json.dumps(bad)] + rows[1:]) + "\n")
    with pytest.raises(ValueError, match="samples.jsonl: record 1 has no field 'correct'"):
        main(["fig7", str(d)])
    with pytest.raises(SystemExit):
        main(["all"])


def test_all_on_a_real_evaluation_of_the_tiny_model(tiny_qwen3_vl_small, tmp_path, capsys):
    """Figures 4, 6 and 7 from a real (fixed-soft) evaluation of the tiny model."""
    from hydra import compose, initialize_config_dir

    from soft_spatial.data.fixtures import write_fixtures
    from soft_spatial.eval import evaluate
    from soft_spatial.eval.__main__ import CONFIG_DIR, build_config

    fx = write_fixtures(tmp_path / "fx")
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
        cfg = build_config(compose(config_name="eval", overrides=[
            f"data.omnispatial={fx.omnispatial}", f"model.path={tiny_qwen3_vl_small}",
            f"output_dir={tmp_path / 'ev'}", "mode=fixed", "samples=2", "max_new_tokens=24",
            "limit=4"]))
    evaluate(cfg, progress=False)
    res = main(["all", "--eval", str(tmp_path / "ev"), "--min-count", "5"])
    out = capsys.readouterr().out
    assert "Fig. 6" in out and "paper 0.590 -> 0.350" in out and "paper 0.235 vs 0.093" in out
    from soft_spatial.eval.steps import read_steps

    steps = read_steps(tmp_path / "ev" / "steps.jsonl")
    assert len(steps) == 8
    assert res["fig6"]["steps"] == sum(int(st["soft"].sum()) for st in steps.values()) > 0
    assert res["fig6"]["r"] is None  # fixed τ: no correlation to speak of
    assert res["fig7"]["summary"]["all"]["within"] == pytest.approx(0.0)  # and no spread
    for name in ("fig6_tau_entropy.png", "fig7_tau_spread.png", "fig4_trace.html",
                 "analysis.json"):
        assert (tmp_path / "ev" / "analysis" / name).is_file()
