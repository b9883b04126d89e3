"""A row's noise is a function of (seed, step) only (docs/design.md §2.2), and a verl rollout's
seed a function of the run's schedule, so two runs draw the same noise.

* ``noise_uniforms`` against an independent pure-Python splitmix64, its grid and its spread;
* the embedded engine and SoftRuntime (the SGLang sampler) under batch orders, batch
  composition, staggered arrivals, chunked prefill, prompt sharing and re-prefill;
* the trainer's tagging of every row with its noise key (that the agent loop sends it and the
  local_soft server gives the same rollouts whatever the request ids and arrival order:
  tests/rollout/test_agent_loop.py, tests/rollout/test_server.py);
* two training runs drawing identical rollouts and logging identical metrics: the signalled run of
  tests/e2e/test_train_signals.py is a second run of the session's ``adaptsoft_run`` command,
  compared with it while held after its last checkpoint (one training start-up fewer).
"""
from __future__ import annotations

import uuid
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

from splitmix_ref import GOLDEN, MASK, mix64, uniforms
from soft_spatial.engines.sglang.client import PARAM_KEY, request_params
from soft_spatial.engines.sglang.runtime import SoftRuntime
from soft_spatial.engines.sglang.server_args import SchedulerSetup
from soft_spatial.softthink.noise import NOISE_KEY, NOISE_ROWS, NoiseKey, request_row_seed, row_seed
from soft_spatial.softthink.settings import SoftSettings
from soft_spatial.softthink import (AdaptSoftConfig, SamplingConfig, SoftThinkingConfig,
                                    noise_uniforms, seed_tensor)

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


# -- the counter-based stream ------------------------------------------------------------------
def test_splitmix_reference_matches_published_values():
    # splitmix64 seeded with 0: the first outputs of the reference C code (Vigna's splitmix64.c)
    state, out = 0, []
    for _ in range(2):
        out.append(mix64(state))
        state = (state + GOLDEN) & MASK
    assert out == [0xE220A8397B1DCDAF, 0x6E789E6AA1B965F4]


@pytest.mark.parametrize("device", DEVICES)
@given(seeds=st.lists(st.integers(-2 ** 80, 2 ** 80), min_size=1, max_size=6),
       step=st.integers(0, 2 ** 40), n=st.integers(1, 9))
@settings(max_examples=60, deadline=None)
def test_noise_uniforms_equal_pure_python_splitmix64(device, seeds, step, n):
    """Exact integer arithmetic: the same bits on every device as on Python integers."""
    u = noise_uniforms(seed_tensor(seeds, device), step, n).cpu()
    ref = torch.tensor([uniforms(s, step, n) for s in seeds], dtype=torch.float64)
    assert u.dtype == torch.float32
    assert torch.equal(u.double(), ref)  # 24-bit values: exact in fp32


def test_noise_uniforms_spread_like_independent_uniforms():
    """Over 4096 rows × 64 steps × 6 slots: a χ² over 64 bins, and no correlation between
    slots, steps or neighbouring seeds beyond what 10⁵ independent samples show."""
    seeds = seed_tensor(range(4096))
    u = torch.stack([noise_uniforms(seeds, t, 6) for t in range(64)], 1).double()  # [r, t, j]
    counts = torch.bincount((u.flatten() * 64).long(), minlength=64).double()
    expected = u.numel() / 64
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    assert chi2 < 120  # 63 degrees of freedom: P(χ² > 120) ≈ 1e-5
    assert abs(float(u.mean()) - 0.5) < 3e-3 and abs(float(u.var()) - 1 / 12) < 2e-3

    def corr(a, b):
        a, b = a.flatten() - a.mean(), b.flatten() - b.mean()
        return float((a * b).sum() / (a.norm() * b.norm()))

    for a, b in [(u[:, :, 0], u[:, :, 1]), (u[:, :-1], u[:, 1:]), (u[:-1], u[1:])]:
        assert abs(corr(a, b)) < 0.01  # |r| of 1e5 independent pairs: sd 0.003


@given(rows=st.lists(st.tuples(st.integers(0, 2 ** 62), st.integers(0, 500)), min_size=1,
                     max_size=8, unique=True), data=st.data())
@settings(max_examples=40, deadline=None)
def test_a_rows_block_does_not_depend_on_the_batch(rows, data):
    """Any subset, in any order, with rows at different steps: each row's block is its own."""
    order = data.draw(st.permutations(range(len(rows))))
    batch = [rows[i] for i in order]
    u = noise_uniforms(seed_tensor([s for s, _ in batch]), torch.tensor([t for _, t in batch]), 5)
    for r, (s, t) in enumerate(batch):
        assert torch.equal(u[r], noise_uniforms(seed_tensor([s]), t, 5)[0])


# -- the embedded engine ----------------------------------------------------------------------
def spy_noise(monkeypatch, module):
    """Record every (seed, step) → block the module draws."""
    seen: dict[tuple[int, int], torch.Tensor] = {}
    real = module.noise_uniforms

    def spy(seed, step, n):
        u = real(seed, step, n)
        steps = torch.as_tensor(step).expand(seed.shape)
        for s, t, row in zip(seed.tolist(), steps.tolist(), u):
            assert (s, t) not in seen or torch.equal(seen[(s, t)], row)
            seen[(s, t)] = row.cpu()
        return u

    monkeypatch.setattr(module, "noise_uniforms", spy)
    return seen


PROMPTS = [[5, 9, 13, 40, 41, 42], [7, 8], [11, 12, 13, 14, 15, 16, 17, 18, 19]]


def test_engine_noise_depends_on_seed_and_step_only(tiny_qwen3_vl_small, monkeypatch):
    """Every block the engine draws is noise_uniforms(row seed, the row's step): in any prompt
    order, alone or with other prompts, in chunks, and the records of the fp64 engine agree."""
    import soft_spatial.engines.local as local
    from soft_spatial.engines import LocalEngine

    engine = LocalEngine.from_pretrained(tiny_qwen3_vl_small, dtype=torch.float64)
    soft, sampling = SoftThinkingConfig(mode="fixed"), SamplingConfig(max_new_tokens=6)
    runs = {"together": ([0, 1, 2], 64), "reversed": ([2, 1, 0], 64), "chunked": ([1, 0, 2], 2),
            "alone": ([1], 64)}
    outs = {}
    for name, (order, rows) in runs.items():
        engine.max_batch_rows = rows
        seen = spy_noise(monkeypatch, local)
        res = engine.generate([PROMPTS[i] for i in order], soft_thinking=soft, sampling=sampling,
                              n=2, seeds=[100 + i for i in order])
        drew = {(seed_tensor([row_seed(100 + order[o.prompt_index], o.sample_index)]).item(), t)
                for o in res for t in range(len(o.token_ids))}
        assert set(seen) == drew  # one block per row and step, nothing else
        for o in res:
            p = order[o.prompt_index]
            outs.setdefault((p, o.sample_index), []).append(o)
            seed = row_seed(100 + p, o.sample_index)
            mine = seed_tensor([seed]).item()
            for t in range(len(o.token_ids)):  # the row drew exactly its own block each step
                assert torch.equal(seen[(mine, t)], noise_uniforms(seed_tensor([seed]), t, 6)[0])
        monkeypatch.undo()
    for row, os_ in outs.items():  # fp64: every run decodes the row identically
        assert all(o.token_ids == os_[0].token_ids for o in os_), row
        assert all(torch.equal(o.trace.scores, os_[0].trace.scores) for o in os_), row


# -- SoftRuntime (the SGLang sampler, no sglang import) -----------------------------------------
K, V, D = 5, 40, 16


def runtime(mode="fixed") -> SoftRuntime:
    return SoftRuntime(SchedulerSetup(
        soft=SoftSettings(soft_thinking=SoftThinkingConfig(mode=mode, top_k=K), adaptsoft=AdaptSoftConfig(), seed=0),
        hidden_size=D, think_end_id=None if mode == "hard" else V - 1, banned_ids=[]))


_SLOT = iter(range(10 ** 6))


def req(rid: str, seed: int, sampling=SamplingConfig()):
    sp = SimpleNamespace(custom_params={PARAM_KEY: request_params(seed, sampling)},
                         temperature=sampling.temperature, top_k=-1, top_p=1.0)
    return SimpleNamespace(rid=rid, output_ids=[], is_chunked=0, sampling_params=sp,
                           req_pool_idx=next(_SLOT) % 97)


def drive(rt: SoftRuntime, schedule, monkeypatch, device="cpu", extend=False):
    """Run ``schedule`` (a list of scheduler steps, each the list of Reqs in the batch; all
    extend batches if ``extend``) and return {rid: [u of its step 0, 1, ...]} as SoftRuntime
    handed them to the sampler."""
    import soft_spatial.engines.sglang.runtime as rtmod

    drawn: dict[str, list[torch.Tensor]] = {}
    current: list = []

    real = rtmod.slot_uniforms

    def spy_noise(seed_mix, step, slots, n):  # the rows of one sampling setting: all of them here
        u, at = real(seed_mix, step, slots, n)
        live = [r for r in current if not getattr(r, "is_chunked", 0)]
        assert len(live) == len(u)
        for r, row in zip(live, u):
            drawn.setdefault(r.rid, []).append(row.cpu())
        return u, at

    monkeypatch.setattr(rtmod, "slot_uniforms", spy_noise)
    g = torch.Generator().manual_seed(0)
    for batch in schedule:
        current[:] = batch
        logits = torch.randn(len(batch), V, generator=g).to(device)
        hidden = torch.randn(len(batch), D, generator=g).to(device)
        tokens, _ = rt.sample(batch, logits, hidden, extend=extend)
        for r, tok in zip(batch, tokens.tolist()):
            if r.is_chunked:
                r.is_chunked = 0  # the next step is its first real one
            else:
                r.output_ids.append(tok)
    monkeypatch.undo()
    return drawn


def expected(seed: int, steps: int) -> list[torch.Tensor]:
    return [noise_uniforms(seed_tensor([seed]), t, K + 1)[0] for t in range(steps)]


@pytest.mark.parametrize("device", DEVICES)
def test_runtime_noise_ignores_order_composition_arrival_and_prefill(monkeypatch, device):
    """Four requests scheduled two ways — all together in one order, or reversed, one joining
    three steps late, one alone for a while, one with a chunked prefill first, plus the n samples
    of one prompt sharing its prefill with a prefill-only request — draw the same blocks."""
    seeds = {f"r{i}": row_seed(7, i) for i in range(4)}  # the G samples of one prompt

    def mk():
        return {rid: req(rid, s) for rid, s in seeds.items()}

    a = mk()
    plain = drive(runtime(), [list(a.values())] * 6, monkeypatch, device)
    b = mk()
    b["r3"].is_chunked = 1
    prefill = req("r0-prefill", request_row_seed(0, "r0-prefill"))  # PromptPrefill's request
    r0, r1, r2, r3 = b["r0"], b["r1"], b["r2"], b["r3"]
    schedule = [[prefill, r1, r0], [r3, r1, r0], [r0, r3, r1], [r1], [r1, r2, r0, r3],
                [r2, r3, r0], [r3, r2, r0], [r2, r1, r3], [r2, r1, r3], [r2]]
    other = drive(runtime(), schedule, monkeypatch, device)
    for rid, seed in seeds.items():
        n = min(len(plain[rid]), len(other[rid]))
        assert n >= 5
        for t in range(n):
            assert torch.equal(plain[rid][t], expected(seed, n)[t]), (rid, t)
            assert torch.equal(other[rid][t], plain[rid][t]), (rid, t)


def test_runtime_reprefill_resumes_at_the_requests_step(monkeypatch):
    """A hard request re-prefilled by SGLang (its state gone, its output kept) and one whose
    step was rolled back draw the blocks of their own next steps, not a restarted stream."""
    import soft_spatial.engines.sglang.runtime as rtmod

    rt = runtime("hard")
    r = req("h", 99)
    drawn = drive(rt, [[r]] * 4, monkeypatch)["h"]
    delattr(r, rtmod.STATE_ATTR)  # a fresh Req object for the same request: 4 tokens out
    again = drive(rt, [[r]] * 2, monkeypatch)["h"]
    r.output_ids = r.output_ids[:3]  # re-prefilled with one step dropped (overlap + retraction)
    back = drive(rt, [[r]], monkeypatch, extend=True)["h"]
    ref = expected(99, 6)
    assert all(torch.equal(x, y) for x, y in zip(drawn + again, ref))
    assert torch.equal(back[0], ref[3])


# -- noise keys: the trainer's tagging ---------------------------------------------------------


class FakeManager:
    def __init__(self):
        self.sent = []

    def generate_sequences(self, prompts):
        self.sent.append(dict(prompts.non_tensor_batch))
        return prompts


def fake_trainer(replicas=1):
    return SimpleNamespace(async_rollout_manager=FakeManager(), global_steps=0,
                           llm_server_manager=SimpleNamespace(get_replicas=lambda: [0] * replicas))


def batch(n, validate=False):
    """A generation batch as verl's trainer sends it: random uids, the validate flag."""
    from verl import DataProto

    uids = np.array([str(uuid.uuid4()) for _ in range(n)], dtype=object)
    return DataProto.from_dict(non_tensors={"uid": uids}, meta_info={"validate": validate})


def run_schedule(trainer):
    """Validation at step 0 (two batches), training steps 1 and 2, validation at step 2."""
    from soft_spatial.integration.ppo_trainer import tag_noise_keys

    tag_noise_keys(trainer)
    gen = trainer.async_rollout_manager.generate_sequences
    for step, validate, n in [(0, True, 3), (0, True, 2), (1, False, 4), (2, False, 4),
                              (2, True, 3)]:
        trainer.global_steps = step
        gen(batch(n, validate))
    return trainer.async_rollout_manager.sent


def test_trainer_tags_every_row_with_a_schedule_key():
    first, second = run_schedule(fake_trainer()), run_schedule(fake_trainer())
    keys = [list(b[NOISE_KEY]) for b in first]
    assert keys == [list(b[NOISE_KEY]) for b in second]  # the uids differ, the keys do not
    flat = [k for b in keys for k in b]
    assert len(set(flat)) == len(flat)  # distinct rows, batches, steps, phases
    assert keys[2] == [str(NoiseKey(False, 1, 0, i)) for i in range(4)]
    assert keys[1] == [str(NoiseKey(True, 0, 1, i)) for i in range(2)]
    assert [list(b[NOISE_ROWS]) for b in first][2] == [4] * 4
    many = run_schedule(fake_trainer(replicas=2))  # no server sees a whole batch
    assert all((b[NOISE_ROWS] == 0).all() for b in many)
    seeds = {request_row_seed(0, k) for k in flat}
    assert len(seeds) == len(flat)
