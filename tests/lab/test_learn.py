"""The learning experiment: warm-start rows through verl's own SFT dataset, the report's statistics
against independent computations, the typed config, and (slow) a reduced run end to end."""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from scipy import stats

from soft_spatial.data import load_omnispatial
from soft_spatial.data.synthetic import read_reasoning, write_benchmark
from soft_spatial.lab.learn import BEFORE_MODE, EVAL_MODE, LearnConfig
from soft_spatial.lab.report import (paired_difference, per_question, read_metrics, trend, write_report)
from soft_spatial.lab.warmstart import (assistant_turn, collate, demonstration, encode, response_loss)
from soft_spatial.data.reward import compute_score

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bench(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    write_benchmark(out, train=10, test=10, seed=0)
    return out


def test_the_warm_start_target_earns_the_full_reward():
    response = assistant_turn("facing up, left", "C").removeprefix("<think>\n")  # prompt has it
    assert compute_score("omnispatial", response, "C") == {"score": 1.2, "acc": 1.0, "format": 0.2}


def test_warm_start_labels_are_exactly_the_response(bench, tiny_qwen3_vl_small):
    """The loss covers exactly what the policy generates after the prompt's ``<think>\\n``: the
    reasoning, ``</think>``, the letter and ``<|im_end|>``; the prompt is what data.prepare and
    eval render (same chat template, same images)."""
    from transformers import AutoProcessor

    records = load_omnispatial(bench, "train")
    reasoning = {k: v["reasoning"] for k, v in read_reasoning(bench / "OmniSpatial-train").items()}
    proc = AutoProcessor.from_pretrained(tiny_qwen3_vl_small)
    examples = [encode(proc, r, reasoning[r.id]) for r in records[:4]]
    batch = collate(examples, proc.tokenizer.pad_token_id)
    for i, (r, e) in enumerate(zip(records, examples)):
        labels = batch["labels"][i]
        target = proc.tokenizer.decode(labels[labels != -100])
        assert target == f"{reasoning[r.id]}\n</think>\n\n{r.answer}<|im_end|>"
        prompt = proc.tokenizer.decode(batch["input_ids"][i, :e.response_start])
        assert prompt.endswith("<|im_start|>assistant\n<think>\n") and r.question in prompt
        n = e.inputs["input_ids"].shape[1]
        assert batch["attention_mask"][i, :n].all() and not batch["attention_mask"][i, n:].any()
    assert batch["pixel_values"].shape[0] == sum(e.inputs["pixel_values"].shape[0]
                                                 for e in examples)


def test_response_loss_is_the_mean_cross_entropy_of_the_response(bench, tiny_qwen3_vl_small):
    from soft_spatial.models.loading import load_model

    model, proc, tok = load_model(tiny_qwen3_vl_small, dtype=torch.float32)
    records = load_omnispatial(bench, "train")[:3]
    reasoning = {k: v["reasoning"] for k, v in read_reasoning(bench / "OmniSpatial-train").items()}
    examples = [encode(proc, r, reasoning[r.id]) for r in records]
    batch = collate(examples, tok.pad_token_id)
    weighted = collate(examples, tok.pad_token_id, answer_weight=5.0)
    with torch.no_grad():
        loss, loss5 = response_loss(model, batch), response_loss(model, weighted)
        logits = model(**{k: v for k, v in batch.items() if k not in ("labels", "weights")}
                       ).logits.double()
    logp = torch.log_softmax(logits, -1)
    terms = [(-logp[i, t - 1, batch["labels"][i, t]], 5.0 if t == e.answer_at else 1.0)
             for i, e in enumerate(examples) for t in range(1, logits.shape[1])
             if batch["labels"][i, t] != -100]
    assert float(loss) == pytest.approx(float(sum(x for x, _ in terms) / len(terms)), rel=1e-5)
    assert float(loss5) == pytest.approx(
        float(sum(x * w for x, w in terms) / sum(w for _, w in terms)), rel=1e-5)
    for i, (r, e) in enumerate(zip(records, examples)):  # the weighted token is the letter
        assert tok.decode(batch["input_ids"][i, e.answer_at]) == r.answer
        assert tok.decode(batch["input_ids"][i, e.answer_at + 1]) == "<|im_end|>"


def test_a_noisy_demonstrator_writes_a_wrong_letter_on_its_fraction_of_records(
        tmp_path, tiny_qwen3_vl_small):
    """warmstart.noise: about that fraction of the records (binomial 4-sigma band) get a wrong
    letter, any wrong one; the same records in every call; noise 0 keeps every answer; the
    encoded target keeps the reasoning and ends with the chosen letter, the token the answer
    weight falls on."""
    from transformers import AutoProcessor

    write_benchmark(tmp_path, train=400, test=1, seed=1)
    records = load_omnispatial(tmp_path, "train")
    noise = 0.3
    letters = [demonstration(r, noise, 5) for r in records]
    assert letters == [demonstration(r, noise, 5) for r in records]
    assert [demonstration(r, 0.0, 5) for r in records] == [r.answer for r in records]
    wrong = [(r, x) for r, x in zip(records, letters) if x != r.answer]
    n = len(records)
    assert abs(len(wrong) - noise * n) < 4 * math.sqrt(n * noise * (1 - noise))
    assert all(x in r.letters for r, x in wrong)
    assert {x for _, x in wrong} == set("ABCD")  # any wrong option, not one
    other = [demonstration(r, noise, 6) for r in records]  # another seed, other records
    assert [x != r.answer for r, x in zip(records, other)] != [x != r.answer for r, x in
                                                               zip(records, letters)]
    proc = AutoProcessor.from_pretrained(tiny_qwen3_vl_small)
    reasoning = read_reasoning(tmp_path / "OmniSpatial-train")
    r, x = wrong[0]
    e = encode(proc, r, reasoning[r.id]["reasoning"], x)
    ids = e.inputs["input_ids"][0]
    assert proc.tokenizer.decode(ids[e.response_start:]) == (
        f"{reasoning[r.id]['reasoning']}\n</think>\n\n{x}<|im_end|>")
    assert proc.tokenizer.decode(ids[e.answer_at]) == x != r.answer


def test_paired_difference_matches_an_independent_computation():
    rng = np.random.default_rng(0)
    before = {q: {"acc": float(a), "category": "c"} for q, a in enumerate(rng.integers(0, 5, 200) / 4)}
    after = {q: {"acc": min(1.0, v["acc"] + float(rng.integers(0, 2)) / 4), "category": "c"}
             for q, v in before.items()}
    r = paired_difference(before, after)
    d = np.array([after[q]["acc"] - before[q]["acc"] for q in range(200)]) * 100
    lo, hi = stats.norm.interval(0.95, loc=d.mean(), scale=d.std(ddof=1) / math.sqrt(len(d)))
    assert r["n"] == 200 and r["diff"] == pytest.approx(d.mean())
    assert (r["lo"], r["hi"]) == pytest.approx((lo, hi))
    assert r["after"] - r["before"] == pytest.approx(r["diff"])
    assert paired_difference(before, after, [])["diff"] is None


def test_trend_slope_and_interval():
    ys = [0.1 + 0.02 * i + 0.01 * ((-1) ** i) for i in range(20)]
    t = trend(ys)
    fit = stats.linregress(np.arange(20), ys)
    assert t["slope"] == pytest.approx(fit.slope)
    assert t["slope_hi"] - t["slope"] == pytest.approx(1.959963984540054 * fit.stderr)
    assert t["first"] == pytest.approx(np.mean(ys[:5])) and t["last"] == pytest.approx(np.mean(ys[-5:]))
    assert trend([1.0, 2.0])["slope"] is None


def test_read_metrics_keeps_the_last_line_of_a_step(tmp_path):
    p = tmp_path / "metrics.jsonl"
    lines = [{"step": 1, "data": {"r": 0.1}}, {"step": 2, "data": {"r": 0.2}},
             {"step": 2, "data": {"r": 0.3}}]  # a resumed run logs step 2 again
    p.write_text("".join(json.dumps(x) + "\n" for x in lines) + '{"step": 3, "da')
    assert read_metrics(p) == [{"step": 1, "r": 0.1}, {"step": 2, "r": 0.3}]
    assert read_metrics(tmp_path / "missing.jsonl") == []


def _samples(path: Path, correct: dict, subcategory: str = "Localization"):
    path.mkdir(parents=True)
    rows = [{"benchmark": "omnispatial", "question_index": q, "sample": s, "category": "x",
             "subcategory": subcategory, "correct": c}
            for q, cs in correct.items() for s, c in enumerate(cs)]
    (path / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_report_table_checks_and_figures(tmp_path, bench):
    _samples(tmp_path / "before", {0: [0, 0], 1: [1, 0], 2: [0, 0]})
    _samples(tmp_path / "after", {0: [1, 1], 1: [1, 1], 2: [1, 0]})
    assert per_question(tmp_path / "after" / "samples.jsonl")[2] == {
        "acc": 0.5, "category": "relative_position", "n": 2}
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text("".join(json.dumps({"step": i + 1, "data": {
        "critic/score/mean": 0.1 * i, "reward/acc_mean": 0.05 * i, "soft/tau_mean": 0.5,
        "soft/tau_min": 0.4 - 0.01 * i, "soft/tau_max": 0.6, "actor/adaptsoft/alpha_rms": 1e-3,
        "actor/adaptsoft/grad_norm": 0.1, "actor/grad_norm": 1.0,
        "timing_s/step": 60.0 if i == 0 else 10.0 + i, "timing_s/gen": 5.0}}) + "\n" for i in range(8)))
    res = write_report(tmp_path, {"adaptsoft": {"before": tmp_path / "before",
                                                "after": tmp_path / "after", "metrics": metrics}},
                       bench, tau0=0.5, seed=0, budget="demo")
    o = res["modes"]["adaptsoft"]["overall"]
    assert o["before"] == pytest.approx(100 / 6) and o["after"] == pytest.approx(500 / 6)
    md = (tmp_path / "report.md").read_text()
    assert "| adaptsoft | 16.7 | 83.3 | +66.7 [+34.0, +99.3] |" in md  # d = (1, .5, .5)
    assert md.count("- [x]") == 4 and "| 8 | 0.500 | 0.330 | 0.600 |" in md
    # step 1 (start-up) aside: steps 2..8 took 11..17 s, median 14; the rollout 5 s every step
    assert res["modes"]["adaptsoft"]["step_time_s"] == {"steps_timed": 7, "timing_s/step": 14.0,
                                                        "timing_s/gen": 5.0}
    assert "| adaptsoft | 14.0 | 5.0 | – | – | – | 7 |" in md
    for png in ("reward.png", "tau.png"):
        assert (tmp_path / png).read_bytes()[:4] == b"\x89PNG"


def test_learn_config_is_typed_and_checked():
    from hydra import compose, initialize_config_dir
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base=None):
        demo = LearnConfig.from_omegaconf(compose(config_name="learn"))
        full = LearnConfig.from_omegaconf(compose(config_name="learn",
                                                  overrides=["budget=full", "seed=3"]))
    assert demo.modes == ["adaptsoft"] and demo.out.endswith("demo/seed0")
    assert demo == LearnConfig(out=demo.out)  # the dataclass defaults are configs/learn.yaml's
    assert full.modes == ["hard", "soft_fixed", "adaptsoft"] and full.out.endswith("full/seed3")
    assert {BEFORE_MODE[EVAL_MODE[m]] for m in full.modes} == {"hard", "fixed"}
    with pytest.raises(ValueError, match="modes"):
        LearnConfig(out="x", modes=["greedy"])
    with pytest.raises(ValueError, match="unknown keys"):
        LearnConfig.from_omegaconf(OmegaConf.create({"out": "x", "data": {"trian": 3}}))


@pytest.mark.slow
def test_reduced_learning_run_changes_policy_and_controller(tmp_path):
    """The whole experiment at toy scale: data, verl SFT warm start, GRPO with AdaptSoft through
    python -m soft_spatial.train, merge, evaluation, report. The training reward varies, and
    both the policy's and the controller's parameters moved."""
    from safetensors.torch import load_file

    from soft_spatial.softthink import AdaptSoft

    out = tmp_path / "learn"
    cmd = [sys.executable, "-m", "soft_spatial.lab.learn", f"out={out}", "seed=1",
           "data.train=160", "data.test=6", "model.hidden_size=64", "model.intermediate_size=128",
           "model.num_hidden_layers=2", "model.head_dim=16", "model.vision_hidden_size=32",
           "model.vision_depth=1", "warmstart.steps=25", "warmstart.batch_size=16",
           "train.steps=3", "train.save_freq=3", "eval.samples=1", "eval.max_new_tokens=24"]
    env = dict(os.environ, HF_HUB_OFFLINE="1", RAY_USAGE_STATS_ENABLED="0")
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=1500, env=env, cwd=ROOT)
    assert res.returncode == 0, (res.stdout + res.stderr)[-4000:]
    assert "adaptsoft step 3/3" in res.stdout and (out / "report.md").is_file()

    metrics = read_metrics(out / "runs/adaptsoft/checkpoints/metrics.jsonl")
    assert [m["step"] for m in metrics] == [1, 2, 3]
    assert any(m["critic/score/max"] > m["critic/score/min"] for m in metrics)  # GRPO signal
    assert len({m["critic/score/mean"] for m in metrics}) > 1  # the reward is not constant
    assert all(m["actor/grad_norm"] > 0 and m["actor/adaptsoft/grad_norm"] > 0 for m in metrics)
    # the recipe's reference density on both sides: rollout and replay agree (they were 16-18
    # nats apart while the rollout recorded the exact density)
    assert all(m["soft/replay_max_abs_diff_soft"] < 1e-3 for m in metrics)
    assert all(m["soft/replay_check_exceeded"] == 0.0 for m in metrics)

    warm = load_file(out / "models/warmstart/model.safetensors")
    final = load_file(next((out / "runs/adaptsoft/final").glob("*.safetensors")))
    moved = [k for k in warm if not torch.equal(warm[k], final[k])]
    assert moved and all(torch.isfinite(v).all() for v in final.values())
    blob = torch.load(out / "runs/adaptsoft/checkpoints/global_step_3/actor/adaptsoft.pt",
                      weights_only=False)
    initial = AdaptSoft(**blob["controller_config"]).state_dict()
    trained = blob["controller"]
    assert torch.equal(initial["projection"], trained["projection"])  # fixed, never trained
    assert not torch.equal(initial["fc2.weight"], trained["fc2.weight"])  # zero at init
    results = json.loads((out / "results.json").read_text())
    assert results["modes"]["adaptsoft"]["overall"]["n"] == 6
    assert (out / "analysis" / "fig5_tau_training.png").is_file()


def test_step_times_are_medians_without_the_first_step():
    import random
    import statistics

    from soft_spatial.lab.report import step_times
    rng = random.Random(0)
    for n in range(1, 12):
        rows = [{"step": i + 1, "timing_s/step": rng.uniform(1, 50), "timing_s/ref": rng.uniform(0, 5)}
                for i in range(n)]
        timed = rows[1:] if n > 1 else rows
        got = step_times(rows)
        assert got["steps_timed"] == len(timed)
        for key in ("timing_s/step", "timing_s/ref"):
            assert got[key] == pytest.approx(statistics.median(r[key] for r in timed))
        assert "timing_s/gen" not in got
