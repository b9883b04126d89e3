"""The warm start (``python -m soft_spatial.lab.learning.warmstart``): the target response and its labels,
the weighted loss against an independent float64 computation, the noisy demonstrator, and the run's
key: a resume under other settings is refused naming them, a finished run re-run is a no-op."""
from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch

from soft_spatial.data import load_omnispatial
from soft_spatial.data.reward import compute_score
from soft_spatial.data.synthetic import read_reasoning, write_benchmark
from soft_spatial.infra.provenance import OutputKeyMismatch
from soft_spatial.lab.learning import warmstart
from soft_spatial.lab.learning.warmstart import (CHECKPOINT, KEY_FILE, WarmStartConfig, assistant_turn,
                                        collate, demonstration, encode, response_loss)


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


class Interrupt(KeyboardInterrupt):
    """Raised by the loss at a chosen step: the warm start stopped as Ctrl-C stops it."""


def _stop_at(monkeypatch, step: int) -> None:
    """Make the warm start's ``step``-th loss raise `Interrupt` (1-based)."""
    calls = {"n": 0}
    loss = warmstart.response_loss

    def counted(model, batch):
        calls["n"] += 1
        if calls["n"] == step:
            raise Interrupt()
        return loss(model, batch)

    monkeypatch.setattr(warmstart, "response_loss", counted)


def test_a_resume_under_other_settings_is_refused_naming_them(tmp_path, monkeypatch, bench,
                                                              tiny_qwen3_vl_small, capsys):
    """Issue 44 item 5: a warm start interrupted after its first saved step, resumed with another
    batch size or learning rate, continued the saved optimizer and data order under the new
    settings and recorded them as the warm start's. Refused now, naming the setting, the saved
    state untouched; the same settings (an output-neutral one changed) resume; the finished run
    re-run is a no-op, and the finished output under other settings is refused."""
    cfg = WarmStartConfig(model_path=str(tiny_qwen3_vl_small), data_root=str(bench),
                          output_dir=str(tmp_path / "warm"), steps=3, batch_size=2, save_every=1,
                          log_every=1)
    work = tmp_path / "warm.work"
    _stop_at(monkeypatch, 2)
    with pytest.raises(Interrupt):
        warmstart.run(cfg)
    state = (work / CHECKPOINT).read_bytes()
    assert torch.load(work / CHECKPOINT, weights_only=True)["step"] == 1

    monkeypatch.undo()
    for change, named in (({"batch_size": 4}, "batch_size: 2 -> 4"), ({"lr": 1e-3}, "lr: 0.002 -> 0.001"),
                          ({"answer_weight": 1.0}, "answer_weight: 10.0 -> 1.0"),
                          ({"view": "nochain"}, "view: hard -> nochain")):
        with pytest.raises(OutputKeyMismatch, match=named):
            warmstart.run(replace(cfg, **change))
        assert (work / CHECKPOINT).read_bytes() == state and not (tmp_path / "warm").exists()

    capsys.readouterr()
    out = warmstart.run(replace(cfg, log_every=2))  # output-neutral: the same key
    assert "resumed at step 1" in capsys.readouterr().out
    assert (out / "model.safetensors").is_file() and (out / KEY_FILE).is_file()
    assert not work.exists()
    weights = (out / "model.safetensors").read_bytes()

    monkeypatch.setattr(warmstart, "load_model", lambda *a, **k: pytest.fail("trained again"))
    assert warmstart.run(cfg) == out and (out / "model.safetensors").read_bytes() == weights
    with pytest.raises(OutputKeyMismatch, match="steps: 3 -> 4"):
        warmstart.run(replace(cfg, steps=4))
    (out / KEY_FILE).unlink()  # an output from before keys were kept
    with pytest.raises(OutputKeyMismatch, match="holds no warmstart.key.json"):
        warmstart.run(cfg)
