"""The warm start's views of path questions (soft_spatial/lab/learning/path_views.py and the view-aware
parts of lab/learning/warmstart.py): the traces against the generator's ground truth, the soft view's
targets and mixtures against the records' branches, and the loss against an independent float64
computation that builds the mixture inputs by hand."""
from __future__ import annotations

import math

import pytest
import torch

from soft_spatial.data import load_omnispatial
from soft_spatial.data.prompt import SYSTEM_PROMPT
from soft_spatial.data.record import index_to_letter
from soft_spatial.data.synthetic import (SyntheticConfig, corpus, path_phrases, read_rows,
                                         write_benchmark)
from soft_spatial.lab.learning.path_views import PathTruth, draw_mixture_scores, hard_trace, trace_words
from soft_spatial.lab.learning.warmstart import (WarmStartConfig, add_mixture_noise, collate, encode_views,
                                        response_loss)
from soft_spatial.models import build_tiny_model

PATHS = ("path_known", "path_two", "path_three")


@pytest.fixture(scope="module")
def paths(tmp_path_factory):
    """A path benchmark (12 train questions, 4 per m) and a tiny model whose BPE knows its words."""
    root = tmp_path_factory.mktemp("paths")
    data, model = root / "data", root / "model"
    write_benchmark(data, train=12, test=3, seed=0,
                    cfg=SyntheticConfig(size=192, tasks=PATHS, options=(4,), describe=True,
                                        option_order="canonical"))
    build_tiny_model(model, family="qwen3_vl", vocab="small", corpus=corpus(tasks=PATHS),
                     bpe_size=640, phrases=[SYSTEM_PROMPT, *path_phrases(PATHS)], hidden_size=32,
                     intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                     num_key_value_heads=1, head_dim=16,
                     vision_config={"hidden_size": 16, "intermediate_size": 32, "depth": 1,
                                    "out_hidden_size": 32})
    from transformers import AutoProcessor

    records = load_omnispatial(data, "train")
    rows = read_rows(data / "OmniSpatial-train")
    return data, model, AutoProcessor.from_pretrained(model), records, rows


def _cfg(data, view, seed=0):
    return WarmStartConfig(model_path="-", data_root=str(data), output_dir="-", view=view,
                           seed=seed)


def _labels(tok, e):
    ids = e.inputs["input_ids"][0].tolist()
    return tok.decode(ids[e.response_start:])


def test_the_true_trace_is_the_generators_reasoning_and_its_quarter_the_answer(paths):
    _, _, _, records, rows = paths
    for r in records:
        truth = PathTruth.from_row(rows[r.id])
        assert " ".join(trace_words(truth, truth.true_branch)) == rows[r.id]["reasoning"]
        assert index_to_letter(truth.quarter(truth.true_branch)) == r.answer
        for b in range(truth.m):  # every trace follows its own branch, circle on the true one
            words = trace_words(truth, b)
            assert ("circle" in words) == (b == truth.true_branch)
            assert words[-2] == truth.branches[b][-1]


def test_a_path_row_without_its_fields_is_refused_by_name():
    with pytest.raises(ValueError, match="'7_0'.*t_star"):
        PathTruth.from_row({"id": "7_0", "moves": ["east"], "grid": 6, "true_branch": 0,
                            "branches": [{"cells": ["a1"]}]}, "data.json")


def test_the_hard_view_follows_a_wrong_branch_at_the_rate_of_a_guess():
    """(m − 1)/m of the records (binomial 4-sigma band), the same in every call, another set for
    another seed; every branch is drawn."""
    truth = PathTruth(("east",) * 8, tuple((f"a{i}",) * 8 for i in range(1, 4)), 1, 4, 6)
    n = 3000
    draws = [hard_trace(truth, 0, f"{i}_0")[0] for i in range(n)]
    assert draws == [hard_trace(truth, 0, f"{i}_0")[0] for i in range(n)]
    wrong = sum(b != truth.true_branch for b in draws)
    assert abs(wrong - n * 2 / 3) < 4 * math.sqrt(n * 2 / 9)
    assert set(draws) == {0, 1, 2}
    assert draws != [hard_trace(truth, 1, f"{i}_0")[0] for i in range(n)]


def test_hard_view_soft_first_label_and_masked_letter_of_a_wrong_trace(paths):
    data, _, proc, records, rows = paths
    tok = proc.tokenizer
    seen_wrong = seen_true = 0
    for seed in range(4):
        for r in records:
            truth = PathTruth.from_row(rows[r.id])
            (e,) = encode_views(proc, r, rows[r.id], _cfg(data, "hard", seed))
            branch, _, _ = hard_trace(truth, seed, r.id)
            words = trace_words(truth, branch)
            letter = index_to_letter(truth.quarter(branch))
            assert _labels(tok, e) == " ".join(words) + f"\n</think>\n\n{letter}<|im_end|>"
            if branch == truth.true_branch:
                seen_true += 1
                assert e.answer_weight is None and letter == r.answer
            else:
                seen_wrong += 1
                assert e.answer_weight == 0.0 and letter != r.answer
            if truth.m == 1:
                assert e.soft_labels == ()
                continue
            (first,) = e.soft_labels  # the cell after move 1, uniform over the m branches
            assert tok.decode([e.inputs["input_ids"][0, first.position]]).strip() == words[1]
            assert sorted(tok.decode([i]).strip() for i in first.ids) == sorted(
                b[0] for b in truth.branches)
            assert first.values == pytest.approx([1 / truth.m] * truth.m)
            batch = collate([e], tok.pad_token_id, answer_weight=10.0)
            assert batch["labels"][0, first.position] == -100  # the distribution, not the token
            assert batch["weights"][0, e.answer_at] == (10.0 if e.answer_weight is None else 0.0)
    assert seen_wrong and seen_true


def test_soft_view_targets_and_mixtures_follow_the_live_cells(paths):
    data, _, proc, records, rows = paths
    tok = proc.tokenizer
    cfg = _cfg(data, "mix")
    for r in records:
        truth = PathTruth.from_row(rows[r.id])
        hard, soft = encode_views(proc, r, rows[r.id], cfg)
        assert _labels(tok, soft) == f"{rows[r.id]['reasoning']}\n</think>\n\n{r.answer}<|im_end|>"
        ids = soft.inputs["input_ids"][0].tolist()
        assert len(soft.soft_labels) == len(soft.mixtures) == truth.t_star
        for s, (t, x) in enumerate(zip(soft.soft_labels, soft.mixtures), 1):
            live = sorted(b[s - 1] for b in truth.branches)
            assert t.position == x.position
            assert tok.decode([ids[t.position]]).strip() == truth.branches[truth.true_branch][s - 1]
            assert tok.decode([ids[t.position - 1]]).strip() == truth.moves[s - 1]
            assert sorted(tok.decode([i]).strip() for i in t.ids) == live
            assert t.values == pytest.approx([1 / truth.m] * truth.m)
            names = [tok.decode([i]).strip() for i in x.ids]
            assert len(x.ids) == 5 and len(set(names)) == 5 and sorted(names[:truth.m]) == live
            p = [math.exp(v) for v in x.values]
            assert sum(p) == pytest.approx(1.0)
            assert p[:truth.m] == pytest.approx([(1 - cfg.distractor_mass) / truth.m] * truth.m)
        after = soft.soft_labels[-1].position + 1  # the collapse: `circle`, then the true path
        assert tok.decode([ids[after]]).strip() == "circle"
        batch = collate([soft], tok.pad_token_id)
        hard_labels = batch["labels"][0]
        assert (hard_labels[[t.position for t in soft.soft_labels]] == -100).all()
        assert (hard_labels[after:len(ids)] == torch.tensor(ids[after:])).all()


def test_no_chain_view_is_the_answer_alone(paths):
    data, _, proc, records, rows = paths
    for r in records[:3]:
        (e,) = encode_views(proc, r, rows[r.id], _cfg(data, "nochain"))
        assert _labels(proc.tokenizer, e) == f"\n</think>\n\n{r.answer}<|im_end|>"
        assert e.soft_labels == () and e.mixtures == ()


def test_mixture_noise_is_gumbel_at_c_1_and_tau_uniform_in_the_controllers_range():
    """Against the recipe written out: u ~ U[0,1) in float64 from the generator, γ = −log(−log u),
    z = log p̃ + γ; then one τ per sequence, U[τ₀ − Δ, τ₀ + Δ] = U[0.1, 0.9]."""
    logp = torch.log_softmax(torch.randn(7, 5, dtype=torch.float64), -1).float()
    rows = torch.tensor([0, 0, 1, 2, 2, 2, 3])
    z, tau = draw_mixture_scores(logp, rows, 4, torch.Generator().manual_seed(3))
    g = torch.Generator().manual_seed(3)
    u = torch.rand(7, 5, generator=g, dtype=torch.float64)
    ref_z = logp.double() + (-torch.log(-torch.log(u)))
    ref_tau = 0.1 + 0.8 * torch.rand(4, generator=g, dtype=torch.float64)
    assert torch.allclose(z.double(), ref_z, atol=1e-5)
    assert torch.allclose(tau.double(), ref_tau[rows], atol=1e-6)
    taus = torch.stack([draw_mixture_scores(logp[:1], torch.zeros(1, dtype=torch.long), 1,
                                            torch.Generator().manual_seed(s))[1] for s in
                        range(2000)])
    assert 0.1 <= taus.min() < 0.12 and 0.88 < taus.max() <= 0.9


def test_two_view_loss_matches_a_float64_reference_with_mixtures_built_by_hand(paths):
    """The loss of a batch with both views: the model fed Σ_k softmax(z/τ)_k E[id_k] at every
    mixture position (built here in float64 from the embedding table), hard cross-entropy at
    token labels, −Σ q log p at soft labels, weighted (letter ×10, masked letters 0)."""
    from soft_spatial.models.loading import load_model

    data, model_dir, proc, records, rows = paths
    model, _, tok = load_model(model_dir, dtype=torch.float32)
    cfg = _cfg(data, "mix")
    ambiguous = [r for r in records if PathTruth.from_row(rows[r.id]).m > 1][:3]
    examples = [e for r in ambiguous for e in encode_views(proc, r, rows[r.id], cfg)]
    batch = add_mixture_noise(collate(examples, tok.pad_token_id, answer_weight=10.0),
                              torch.Generator().manual_seed(11))
    with torch.no_grad():
        loss = float(response_loss(model, batch))
        table = model.get_input_embeddings().weight.double()
        embeds = table[batch["input_ids"]]
        for n, (i, p) in enumerate(zip(batch["mix_rows"].tolist(), batch["mix_pos"].tolist())):
            w = torch.softmax(batch["mix_scores"][n].double() / batch["mix_tau"][n].double(), -1)
            embeds[i, p] = (w[:, None] * table[batch["mix_ids"][n]]).sum(0)
        inputs = {k: v for k, v in batch.items() if k in (
            "attention_mask", "pixel_values", "image_grid_thw", "mm_token_type_ids")}
        hook = model.get_input_embeddings().register_forward_hook(
            lambda mod, args, out: embeds.to(out.dtype))  # the model's own image insertion stays
        try:
            logits = model(input_ids=batch["input_ids"], **inputs).logits.double()
        finally:
            hook.remove()
    logp = torch.log_softmax(logits, -1)
    num = den = 0.0
    for i, e in enumerate(examples):
        soft = {t.position: t for t in e.soft_labels}
        n = e.inputs["input_ids"].shape[1]
        for p in range(e.response_start, n):
            w = (10.0 if e.answer_weight is None else e.answer_weight) if p == e.answer_at else 1.0
            if p in soft:
                term = -sum(q * logp[i, p - 1, j] for j, q in zip(soft[p].ids, soft[p].values))
            else:
                term = -logp[i, p - 1, batch["input_ids"][i, p]]
            num, den = num + w * float(term), den + w
    assert loss == pytest.approx(num / den, rel=1e-5)


def test_the_mixture_reaches_every_candidates_embedding_row(paths):
    """Gradient of the two-view loss reaches the distractor cells' rows (fed only as mixture
    components), and a batch without its noise is refused."""
    from soft_spatial.models.loading import load_model

    data, model_dir, proc, records, rows = paths
    model, _, tok = load_model(model_dir, dtype=torch.float32)
    r = next(r for r in records if PathTruth.from_row(rows[r.id]).m == 3)
    _, soft = encode_views(proc, r, rows[r.id], _cfg(data, "mix"))
    batch = collate([soft], tok.pad_token_id)
    with pytest.raises(ValueError, match="add_mixture_noise"):
        response_loss(model, batch)
    response_loss(model, add_mixture_noise(batch, torch.Generator().manual_seed(0))).backward()
    grad = model.get_input_embeddings().weight.grad
    fed = set(batch["input_ids"][0].tolist())
    only_mixed = {i for x in soft.mixtures for i in x.ids[3:]} - fed
    assert only_mixed and all(grad[i].abs().sum() > 0 for i in only_mixed)


def test_view_is_checked_by_name():
    with pytest.raises(ValueError, match="warmstart.view"):
        WarmStartConfig(model_path="-", data_root="-", output_dir="-", view="soft")
    with pytest.raises(ValueError, match="distractor_mass"):
        WarmStartConfig(model_path="-", data_root="-", output_dir="-", distractor_mass=0.0)


def test_lazy_pixels_collate_to_the_processors_own_pixel_values(paths):
    """A run keeps images, not pixel values (0.9 MB each at 192 pixels: 16,000 records in two
    views do not fit); the batch's pixel values are the ones the processor gives at encoding."""
    data, _, proc, records, rows = paths
    cfg = _cfg(data, "mix")
    eager = [e for r in records[:4] for e in encode_views(proc, r, rows[r.id], cfg)]
    lazy = [e for r in records[:4] for e in encode_views(proc, r, rows[r.id], cfg, lazy_pixels=True)]
    assert all("pixel_values" not in e.inputs and e.images for e in lazy)
    a = collate(eager, proc.tokenizer.pad_token_id)
    b = collate(lazy, proc.tokenizer.pad_token_id, image_processor=proc.image_processor)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    with pytest.raises(ValueError, match="image_processor"):
        collate(lazy, proc.tokenizer.pad_token_id)
