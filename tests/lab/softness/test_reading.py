"""The reading diagnostic (soft_spatial/lab/softness/reading.py): its rule, its binding measures on
hand-built embeddings, and the whole command at a tiny size against the evaluation it stands beside:
its hard decode reproduces ``python -m soft_spatial.eval mode=hard`` (the command's configuration,
composed and run in this process) sample by sample, and it reports what its files hold."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch
from hydra import compose, initialize_config_dir

from soft_spatial.data import load_omnispatial
from soft_spatial.data.synthetic import read_rows
from soft_spatial.eval.__main__ import CONFIG_DIR, build_config
from soft_spatial.eval.runner import evaluate, read_results
from soft_spatial.lab.learning.path_views import PathTruth, soft_view_targets, trace_words, word_positions
from soft_spatial.lab.learning.warmstart import add_mixture_noise, collate, encode, response_loss
from soft_spatial.lab.softness.reading import (DECODES, RULE, ReadingConfig, binding_distances,
                                               decide, readout_summary, run, teacher_forced)
from soft_spatial.lab.softness.stage0 import bootstrap_diff, per_question


def test_the_rule_as_registered():
    assert "oracle-in-hard − hard ≥ +10 points" in RULE and "oracle-in-hard − guess-in-hard ≥ +5" in RULE
    ok = {"diff": 10.0, "lo": 0.1}
    assert decide(ok, {"diff": 5.0})["intact"]
    assert not decide({"diff": 9.9, "lo": 3.0}, {"diff": 20.0})["intact"]
    assert not decide({"diff": 12.0, "lo": 0.0}, {"diff": 20.0})["intact"]  # the CI touches 0
    got = decide({"diff": 12.0, "lo": 2.0}, {"diff": 4.9})
    assert not got["intact"] and got["verdict"] == "reading is not intact (fails: oracle - guess >= +5)"


def test_binding_distances_see_an_additive_code():
    rng = np.random.default_rng(0)
    col, row = rng.normal(size=(6, 16)), rng.normal(size=(6, 16))
    additive = np.stack([col[i % 6] + row[i // 6] for i in range(36)])
    got = binding_distances(additive, pairs=2000)
    # a column + row code mixes a live pair and its cross pair to the same input
    assert got["cross_median"] == pytest.approx(0.0, abs=1e-9) and got["rectangles"] == 225
    assert got["random_below_cross_median"] == 0.0
    free = binding_distances(rng.normal(size=(36, 16)), pairs=2000)
    assert 0.8 < free["ratio"] < 1.2 and 0.3 < free["random_below_cross_median"] < 0.7


def test_readouts_per_cell_from_the_branch_steps_after_the_first():
    r = {"m": 2, "readouts": [
        {"step": 1, "live_mass": 0.0, "true_weight": 0.0, "cross_mass": 1.0, "n_cross": 2,
         "line_mass": 0.0, "n_line": 16},
        {"step": 2, "live_mass": 0.5, "true_weight": 0.3, "cross_mass": 0.2, "n_cross": 2,
         "line_mass": 0.16, "n_line": 16},
        {"step": 3, "live_mass": 0.7, "true_weight": 0.5, "cross_mass": 0.0, "n_cross": 2,
         "line_mass": 0.16, "n_line": 16}]}
    got = readout_summary([r, {"m": 3, "readouts": r["readouts"]}], 2)
    assert got["steps"] == 2 and got["live_mass"] == pytest.approx(0.6)
    assert got["cross_per_cell"] == pytest.approx(0.05) and got["line_per_cell"] == pytest.approx(0.01)
    assert got["cross_over_line"] == pytest.approx(5.0)
    assert readout_summary([r], 3) == {"steps": 0}


def test_the_command_at_a_tiny_size(seed_dir, tmp_path):
    """The hard evaluation as ``python -m soft_spatial.eval mode=hard ...`` runs it (composed
    from configs/eval.yaml, run in this process); the diagnostic's hard decode draws its samples,
    and every number of reading.json is what the sample files hold."""
    eval_dir = tmp_path / "gate_mix_hard"
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
        ecfg = build_config(compose(config_name="eval", overrides=[
            "benchmarks=[omnispatial]", f"data.omnispatial={seed_dir / 'data'}",
            f"model.path={seed_dir / 'models' / 'warmstart'}", "mode=hard", "samples=2",
            "temperature=1.0", "max_new_tokens=14", "seed=0", f"output_dir={eval_dir}"]))
    evaluate(ecfg, progress=False)
    cfg = ReadingConfig(str(seed_dir), samples=2, max_new_tokens=14, limit=1, pairs=200, draws=200)
    result = run(cfg, eval_dir, say=lambda *_: None)
    out = cfg.out
    files = {n: read_results(out / f"samples_{n}.jsonl") for n in DECODES}
    # the hard decode is the evaluation, sample by sample (its answers too)
    ev = {(r["question_id"], r["sample"]): r for r in read_results(eval_dir / "samples.jsonl")}
    assert len(files["hard"]) == 3 * 2
    for r in files["hard"]:
        e = ev[r["question_id"], r["sample"]]
        assert (r["text"], r["pred"], r["correct"], r["think_closed"]) == (
            e["text"], e["pred"], e["correct"], e["think_closed"])
    assert result["hard_vs_evaluation"] == {"n": 6, "identical": 100.0}
    assert all(r["branch"] is not None for r in files["guess"])
    # what reading.json holds is what the files give
    saved = json.loads((out / "reading.json").read_text())
    rows = read_rows(seed_dir / "data" / "OmniSpatial-test")
    for name, samples in files.items():
        for m in (1, 2, 3):
            want = 100 * np.mean([r["correct"] for r in samples if r["m"] == m])
            assert saved["accuracy"][name][str(m)] == pytest.approx(want)
    q = {n: per_question(v, rows, 2) for n, v in files.items()}
    assert saved["contrasts"]["oracle - hard"]["2"] == bootstrap_diff(q["oracle"], q["hard"], 200)
    assert saved["decision"] == decide(bootstrap_diff(q["oracle"], q["hard"], 200),
                                       bootstrap_diff(q["oracle"], q["guess"], 200))
    assert saved["rule"] == RULE and "Verdict: reading is" in (out / "reading.md").read_text()
    assert set(saved["exploratory"]["teacher_forced_soft_view"]) == {"1", "2", "3"}
    # a re-run resumes: nothing decoded twice
    before = {n: (out / f"samples_{n}.jsonl").read_text() for n in DECODES}
    run(cfg, eval_dir, say=lambda *_: None)
    assert {n: (out / f"samples_{n}.jsonl").read_text() for n in DECODES} == before
    shutil.rmtree(out)


def test_the_teacher_forced_soft_view_is_the_training_objective(seed_dir):
    """P(circle) is exp(−loss) of the warm start's own loss with the circle as its only label,
    over the same soft view and noise."""
    from soft_spatial.engines.local import LocalEngine

    engine = LocalEngine.from_pretrained(seed_dir / "models" / "warmstart")
    rows = read_rows(seed_dir / "data" / "OmniSpatial-test")
    rec = next(r for r in load_omnispatial(seed_dir / "data", "test") if len(rows[r.id]["branches"]) == 2)
    got = teacher_forced(engine.model, engine.processor, [rec], rows, seed=3)
    assert set(got) == {2} and got[2]["items"] == 1 and got[2]["branch_steps"]["steps"] >= 1
    tok = engine.tokenizer
    truth = PathTruth.from_row(rows[rec.id])
    words = trace_words(truth, truth.true_branch)
    ex = encode(engine.processor, rec, " ".join(words))
    ids = ex.inputs["input_ids"][0].tolist()
    positions = word_positions(tok, ids, ex.response_start, words, "test")
    targets, mixtures = soft_view_targets(tok, truth, positions, 3, rec.id, 0.05)
    from dataclasses import replace

    batch = collate([replace(ex, soft_labels=tuple(targets), mixtures=tuple(mixtures))],
                    tok.pad_token_id)
    add_mixture_noise(batch, torch.Generator().manual_seed(3))
    pc = positions[2 * truth.t_star]
    keep = torch.zeros_like(batch["labels"], dtype=torch.bool)
    keep[0, pc] = True
    batch["labels"] = batch["labels"].masked_fill(~keep, -100)
    batch["weights"] = keep.float()
    for key in [k for k in batch if k.startswith("soft_")]:
        del batch[key]
    with torch.no_grad():
        loss = response_loss(engine.model, batch)
    assert got[2]["p_circle"] == pytest.approx(float(torch.exp(-loss)), rel=1e-4)
