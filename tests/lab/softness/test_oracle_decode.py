"""The oracle decode of Stage 0 (soft_spatial/lab/softness/oracle_decode.py) at tiny sizes: without an
oracle it draws exactly the engine's samples; with one, the input after each branch step is the
live mixture built from the soft view's candidates with the rollout's own uniforms and τ
(checked against a float64 formula), the model reads exactly those inputs (an uncached forward
over the prompt and the recorded inputs gives the recorded logits), and the emitted tokens up to
the first replaced input are the plain decode's; in hard decoding (the reading diagnostic) exactly
the inputs after the branch steps are replaced, every other one is the sampled token's."""
from __future__ import annotations

import math

import pytest
import torch

from soft_spatial.data import build_messages, load_omnispatial
from soft_spatial.data.synthetic import SyntheticConfig, read_rows, write_benchmark
from soft_spatial.engines.local import LocalEngine
from soft_spatial.lab.softness.oracle_decode import OracleSpec, cross_cells, decode, oracle_plan
from soft_spatial.lab.learning.path_views import PathTruth
from soft_spatial.softthink import SamplingConfig, SoftThinkingConfig
from soft_spatial.softthink.noise import noise_uniforms, row_seed, seed_tensor

PATHS = ("path_known", "path_two", "path_three")


@pytest.fixture(scope="module")
def setup(tmp_path_factory, tiny_paths_model):
    root = tmp_path_factory.mktemp("oracle")
    write_benchmark(root / "data", train=3, test=3, seed=0,
                    cfg=SyntheticConfig(size=192, tasks=PATHS, options=(4,), describe=True,
                                        option_order="canonical"))
    engine = LocalEngine.from_pretrained(tiny_paths_model)
    records = load_omnispatial(root / "data", "test")
    rows = read_rows(root / "data" / "OmniSpatial-test")
    # the two-start question
    rec = next(r for r in records if len(rows[r.id]["branches"]) == 2)
    return engine, rec, rows[rec.id]


SOFT = SoftThinkingConfig(mode="fixed", fixed_tau=0.9)
SAMPLING = SamplingConfig(temperature=1.0, max_new_tokens=12, top_k=5)


@pytest.mark.parametrize("soft", [SOFT, SoftThinkingConfig(mode="hard")])
def test_without_an_oracle_it_draws_the_engines_samples(setup, soft):
    engine, rec, row = setup
    messages = build_messages(rec)
    ref = engine.generate([messages], soft_thinking=soft, sampling=SAMPLING, n=3, seeds=[7])
    got = decode(engine, messages, row, soft, SAMPLING, 3, 7)
    assert [d.token_ids for d in got] == [c.token_ids for c in ref]
    assert [d.text for d in got] == [c.text for c in ref]
    assert [d.think_closed for d in got] == [c.think_closed for c in ref]
    assert all(not d.readouts for d in got)  # a random model writes no path chain


def _forced(words, t_star):
    """Test-only branch steps: the 2nd and 5th emitted words, as steps 1 and 2."""
    return {2: 1, 5: 2}.get(len(words))


def test_the_oracle_mixture_is_the_live_mixture_at_the_rollouts_noise_and_tau(setup):
    engine, rec, row = setup
    messages = build_messages(rec)
    spec = OracleSpec("mixture", seed=0)
    plain = decode(engine, messages, row, SOFT, SAMPLING, 2, 3, branch_step=_forced, debug=True)
    got = decode(engine, messages, row, SOFT, SAMPLING, 2, 3, spec, branch_step=_forced, debug=True)
    truth = PathTruth.from_row(row)
    plan = oracle_plan(engine.tokenizer, row, spec, SOFT.top_k)
    live = {s: [b[s - 1] for b in truth.branches] for s in (1, 2)}
    tok = engine.tokenizer
    for j, (d, p) in enumerate(zip(got, plain)):
        # the first replaced input is the one after the 2nd step: the tokens up to it are the
        # plain decode's, and the token read from it differs here
        assert d.token_ids[:2] == p.token_ids[:2] and d.token_ids[2] != p.token_ids[2]
        assert torch.equal(d.inputs[0], p.inputs[0])
        assert [r.step for r in d.readouts] == [1, 2] and all(r.replaced for r in d.readouts)
        u = noise_uniforms(seed_tensor([row_seed(3, j)]), 1, SOFT.top_k + 1)[0, :SOFT.top_k].double()
        ids, logp = plan[1]
        assert [tok.decode([i]).strip() for i in ids[:2].tolist()] == live[1]
        assert logp[:2].exp().sum().item() == pytest.approx(0.95)  # ε = 0.05 on distractors
        z = logp + (-torch.log(-torch.log(u)))
        w = torch.softmax(z / 0.9, -1)
        want = (w[:, None] * engine.embed.weight.double()[ids]).sum(0)
        assert torch.allclose(d.inputs[1].double(), want, atol=1e-6)
        assert not torch.allclose(d.inputs[1], p.inputs[1])


def test_the_model_reads_the_replaced_inputs(setup):
    """An uncached forward over the prompt and the recorded inputs gives the recorded logits at
    every step, oracle steps included (a text-only prompt, so the forward needs no image)."""
    engine, rec, row = setup
    messages = [{"role": "user", "content": rec.question}]
    for spec in (OracleSpec("mixture"), OracleSpec("guess")):
        d = decode(engine, messages, row, SOFT, SAMPLING, 1, 5, spec, branch_step=_forced,
                   debug=True)[0]
        ids = engine.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
        ids = ids["input_ids"] if hasattr(ids, "keys") else ids
        prompt = engine.embed(torch.tensor([ids]))[0]
        seq = torch.cat([prompt, torch.stack(d.inputs)])[None]
        with torch.no_grad():
            h = engine.base(inputs_embeds=seq).last_hidden_state[0]
            logits = engine.lm_head(h[len(ids) - 1:]).index_fill(-1, engine.banned_ids,
                                                                 float("-inf"))
        assert torch.allclose(logits[:len(d.logits)], torch.stack(d.logits), atol=1e-4)
        if spec.kind == "guess":
            cell = PathTruth.from_row(row).branches[d.branch][0]
            assert torch.equal(d.inputs[1], engine.embed.weight[
                engine.tokenizer.encode(" " + cell, add_special_tokens=False)[0]])


def test_cross_cells_and_the_spec():
    assert sorted(cross_cells(["b2", "d5"])) == ["b5", "d2"]
    assert cross_cells(["b2", "b5"]) == []  # same column: no cross cell
    assert len(cross_cells(["a1", "c3", "e5"])) == 6
    with pytest.raises(ValueError, match="oracle must be one of"):
        OracleSpec("perfect")
    assert math.isclose(OracleSpec().distractor_mass, 0.05)


HARD = SoftThinkingConfig(mode="hard")


def test_in_hard_decoding_exactly_the_branch_steps_inputs_are_replaced(setup):
    """The reading diagnostic's decode: every input is the sampled token's embedding but those
    after the branch steps (here the 2nd and 5th words), which are the oracle's: the live mixture
    at Stage 0's τ 0.9 and the step's own uniforms, or the guessed start's live cell. The readouts
    are the model's next-token probabilities at those steps."""
    engine, rec, row = setup
    messages = build_messages(rec)
    truth = PathTruth.from_row(row)
    tok = engine.tokenizer
    live = {s: [tok.encode(" " + b[s - 1], add_special_tokens=False)[0] for b in truth.branches]
            for s in (1, 2)}
    plain = decode(engine, messages, row, HARD, SAMPLING, 3, 3, branch_step=_forced, debug=True)
    seen = 0
    for spec in (OracleSpec("mixture", seed=0), OracleSpec("guess")):
        plan = oracle_plan(tok, row, spec, HARD.top_k)
        got = decode(engine, messages, row, HARD, SAMPLING, 3, 3, spec, branch_step=_forced,
                     debug=True)
        for j, (d, p) in enumerate(zip(got, plain)):
            assert d.token_ids[:2] == p.token_ids[:2]  # nothing differs before the first oracle
            replaced = {1: 1, 4: 2}  # input index (after token i) -> step s
            for i, x in enumerate(d.inputs):
                if i not in replaced:
                    assert torch.equal(x, engine.embed.weight[d.token_ids[i]]), (spec.kind, j, i)
                    continue
                s = replaced[i]
                if spec.kind == "guess":
                    want = engine.embed.weight[live[s][d.branch]].double()
                else:
                    ids, logp = plan[s]
                    u = noise_uniforms(seed_tensor([row_seed(3, j)]), i, HARD.top_k + 1)[0, :HARD.top_k]
                    w = torch.softmax((logp + (-torch.log(-torch.log(u.double())))) / 0.9, -1)
                    want = (w[:, None] * engine.embed.weight.double()[ids]).sum(0)
                    assert not torch.allclose(x.double(), engine.embed.weight[d.token_ids[i]].double())
                assert torch.allclose(x.double(), want, atol=1e-6), (spec.kind, j, i)
                seen += 1
            assert [r.step for r in d.readouts] == [s for i, s in replaced.items()
                                                    if i < len(d.token_ids)]
            for r, i in zip(d.readouts, replaced):
                probs = torch.softmax(d.logits[i].double() / SAMPLING.temperature, -1)
                assert r.live_mass == pytest.approx(float(probs[live[r.step]].sum()))
                assert r.true_weight == pytest.approx(float(probs[live[r.step][truth.true_branch]]))
    assert seen >= 8  # both oracles replaced both steps in most samples


def test_cross_cells_fair_null_is_the_rest_of_the_live_rows_and_columns():
    from soft_spatial.lab.softness.oracle_decode import line_cells

    line = line_cells(["b2", "d5"])
    # columns b, d and rows 2, 5: 20 cells, less the live pair and its cross pair
    assert len(line) == 16 and not {"b2", "d5", "b5", "d2"} & set(line)
    assert {"b1", "b6", "d3", "a2", "f2", "c5"} <= set(line) and "c3" not in line
    assert sorted(line_cells(["c3"])) == sorted(({f"c{r}" for r in range(1, 7)}
                                                 | {f"{c}3" for c in "abcdef"}) - {"c3"})
