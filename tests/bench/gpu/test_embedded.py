"""A/embedded (soft_spatial/bench/gpu/embedded.py) at its dry run's sizes on the CPU: the tiny
Qwen3-VL with images decodes the same tokens softly at τ→0 as greedily, each mode's throughput is
measured against hard's, and the report says so; a prompt that leaves greedy decoding before any
tie is named. On a GPU the same job runs at the 8B shape (the plan's ``--only A/embedded``)."""
from __future__ import annotations

from soft_spatial.bench.gpu import embedded
from soft_spatial.bench.gpu.context import KitContext


def test_the_dry_run_decodes_greedily_at_the_limit_and_times_every_mode(tmp_path):
    ctx = KitContext(dry_run=True, device="cpu", work=tmp_path, out=tmp_path, deadline_at=0.0,
                     report=None)
    r = embedded.measure(ctx, None)
    (limit,) = r.greedy  # fp32 on the CPU: no second check
    assert (limit.dtype, limit.prompts, limit.steps) == ("float32", 2, 8)
    assert limit.same == limit.prompts and limit.unexplained == 0 and limit.repeat == limit.prompts
    assert [row[0] for row in r.modes] == ["hard", "fixed", "adaptsoft"]
    assert r.modes[0][2] == 1.0 and all(row[1] > 0 for row in r.modes)  # tok/s, × hard
    text = "\n".join(embedded.render(r))
    assert "Greedy limit (float32): 2/2 prompts decode the same 8 tokens" in text
    assert "| adaptsoft |" in text and "2 prompts × G=2 = 4 rows" in text
    assert "**Attention**" not in text


def test_a_prompt_that_parts_before_any_tie_is_named():
    limit = embedded.GreedyLimit("bfloat16", 8, 128, 6, 1, 1, ["–/–"] * 7 + ["5/9"], 8)
    r = embedded.EmbeddedResult(8.77, "bfloat16", "cuda", 1.6, 8, 8, 320, 128, 2,
                                greedy=[limit, embedded.GreedyLimit("float32", 8, 128, 8, 0, 0,
                                                                    ["–/–"] * 8, 8)])
    text = "\n".join(embedded.render(r))
    assert "The same check with the model in float32:" in text
    assert "**Attention**: 1 prompts left greedy decoding before any tie (bfloat16)" in text
    assert "(float32)" not in text.split("**Attention**")[1]
