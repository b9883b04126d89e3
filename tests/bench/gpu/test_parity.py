"""soft_spatial_bench/gpu/parity.py on synthetic completions: the first row, step and field where two runs
differ (with both values), per-step max |Δ| from the first step (smooth growth vs a jump), and
the per-row verdict against docs/sglang.md's bound."""
import copy
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from soft_spatial.engines.base import Completion
from soft_spatial.softthink import SoftTrace
from soft_spatial.softthink.trace import TRACE_KEYS

from soft_spatial_bench.gpu import parity

L, K = 10, 3


def row(seed: int) -> Completion:
    """A soft row with random candidates, scores, τ and log-likelihoods."""
    g = torch.Generator().manual_seed(seed)
    ids, steps = torch.randint(0, 1000, (L, K), generator=g), L
    trace = SoftTrace(ids, torch.randn(steps, K, generator=g), torch.rand(steps, generator=g) + 0.5,
                      torch.rand(steps, generator=g), torch.zeros(steps, 2),
                      torch.rand(steps, generator=g), torch.ones(steps, dtype=torch.bool))
    return Completion(0, seed, [1, 2], ids[:, 0].tolist(), "", trace, "length",
                      logprobs=torch.randn(steps, generator=g).tolist())


def rows(n: int = 3) -> list[Completion]:
    return [row(i) for i in range(n)]


def with_token(c: Completion, s: int, tok: int) -> Completion:
    c = copy.deepcopy(c)
    c.token_ids[s] = tok
    c.trace.topk_ids[s, 0] = tok
    return c


def test_identical_runs_have_no_divergence_and_zero_deltas():
    a, b = rows(), rows()
    assert parity.first_divergence(a, b) is None
    assert all(v == [0.0] * L for v in parity.per_step_deltas(a, b).values())
    assert [v["status"] for v in parity.row_verdicts(a, a, b)] == ["ok"] * 3


def test_first_divergence_names_the_earliest_step_then_the_lowest_row_with_both_values():
    a = rows(4)
    b = copy.deepcopy(a)
    b[3] = with_token(b[3], 6, 999)
    b[1].trace.scores[4, 2] += 0.01
    b[2].trace.scores[4, 0] += 0.5  # same step, higher row
    d = parity.first_divergence(a, b, tol=1e-3)
    assert (d["row"], d["step"], d["field"]) == (1, 4, "scores")
    assert d["a"] == a[1].trace.scores[4].tolist() and d["b"] == b[1].trace.scores[4].tolist()
    path = parity.first_divergence(a, b, tol=math.inf)  # the decoding path only
    assert (path["row"], path["step"], path["field"], path["a"], path["b"]) == (
        3, 6, "token", a[3].token_ids[6], 999)
    assert parity.first_divergence(a, b, tol=1.0)["field"] == "token"  # 0.5 is within 1.0
    assert "row 1 step 4 scores: x [" in parity.describe(d, ("x", "y"))


def test_fields_are_checked_in_path_order_and_tau_loglik_found():
    a = rows(1)
    b = copy.deepcopy(a)
    b[0].logprobs[2] += 1.0
    b[0].trace.tau[2] += 1.0
    assert parity.first_divergence(a, b)["field"] == "tau"
    b[0].trace.soft[2] = False
    assert parity.first_divergence(a, b)["field"] == "soft"
    c = copy.deepcopy(a)
    c[0].logprobs[7] = float("nan")  # NaN is a difference, whatever the tolerance
    assert parity.first_divergence(a, c, tol=math.inf)["field"] == "loglik"


def test_length_and_row_count_mismatches():
    a = rows(2)
    b = copy.deepcopy(a)
    b[1].token_ids, b[1].logprobs = b[1].token_ids[:L - 2], b[1].logprobs[:L - 2]
    b[1].trace = SoftTrace(*(getattr(b[1].trace, k)[:L - 2] for k in TRACE_KEYS))
    d = parity.first_divergence(a, b)
    assert (d["row"], d["step"], d["field"], d["a"], d["b"]) == (1, L - 2, "length", L, L - 2)
    with pytest.raises(ValueError, match="3 rows against 2"):
        parity.first_divergence(rows(3), rows(2))


def test_per_step_deltas_recover_smooth_growth_and_a_jump():
    a = rows(2)
    b = copy.deepcopy(a)
    growth = [1e-6 * 2.0 ** s for s in range(L)]
    for s, e in enumerate(growth):  # amplification: doubling per step
        b[0].trace.scores[s] = (a[0].trace.scores[s].double() + e).float()
    b[1].logprobs[7] += 0.25  # a bug: nothing, then a jump
    d = parity.per_step_deltas(a, b)
    assert d["scores"] == pytest.approx(growth, rel=0.05, abs=5e-7)
    assert d["loglik"][:7] == [0.0] * 7 and d["loglik"][7] == pytest.approx(0.25)
    assert d["tau"] == [0.0] * L
    assert parity.curve(d["loglik"], 7) == "0.0e+00 2.5e-01"


def test_per_step_deltas_stop_at_a_rows_path_divergence():
    a = rows(2)
    b = copy.deepcopy(a)
    b[0] = with_token(b[0], 3, 999)
    b[0].trace.scores[5:] += 9.0  # after the divergence: other candidates, not compared
    b[1].trace.scores[:3] += 1e-3
    d = parity.per_step_deltas(a, b)["scores"]
    assert d[:3] == pytest.approx([1e-3] * 3, rel=1e-3) and d[3:] == [0.0] * (L - 3)
    b[1] = with_token(b[1], 0, 999)
    assert all(math.isnan(x) for x in parity.per_step_deltas(a, b)["scores"][3:])


def test_row_verdicts_against_the_fp64_reference():
    ref = rows(4)
    want = copy.deepcopy(ref)
    for r in want:  # the local fp32 run: 1e-4 off fp64 everywhere
        r.trace.scores += 1e-4
    got = copy.deepcopy(ref)
    for r in got:
        r.trace.scores += 3e-3  # within 3e-3 + 4 · 1e-4
    want[1] = with_token(want[1], 5, 999)  # local fp32 itself leaves fp64's path
    got[2] = with_token(got[2], 5, 999)  # the engine leaves a well-conditioned row's path
    got[3].trace.tau[4] += 0.01  # beyond 3e-3 + 4 · 0
    v = parity.row_verdicts(got, want, ref)
    assert [x["status"] for x in v] == ["ok", "ill-conditioned", "path", "bound"]
    assert v[3]["field"] == "tau" and v[3]["dev"] == pytest.approx(0.01, rel=1e-3)
    assert v[3]["bound"] == pytest.approx(parity.ATOL) and v[1]["steps"] == 5
    got[1].trace.scores[2] += 0.1  # ill-conditioned rows are still bounded before the split
    assert parity.row_verdicts(got, want, ref)[1]["status"] == "bound"


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 3), st.integers(0, L - 1), st.sampled_from(["token", "scores", "loglik"]),
       st.integers(0, 2))
def test_first_divergence_is_symmetric_and_finds_a_single_change(r, s, field, seed):
    a = [row(seed + i) for i in range(4)]
    b = copy.deepcopy(a)
    if field == "token":
        b[r] = with_token(b[r], s, 1000 + s)
    elif field == "scores":
        b[r].trace.scores[s, 1] += 0.5
    else:
        b[r].logprobs[s] -= 0.5
    d, e = parity.first_divergence(a, b), parity.first_divergence(b, a)
    assert (d["row"], d["step"], d["field"]) == (e["row"], e["step"], e["field"]) == (r, s, field)
    assert (d["a"], d["b"]) == (e["b"], e["a"])
