"""C/actor-update (soft_spatial/bench/gpu/actor_update.py): each mode timed in a process of its own
on a device, all three in one in a dry run; the child refuses a mode it does not know; the dry run
on the CPU updates the tiny model through verl's FSDP2 engine in every mode (slow: a verl start).
On a GPU the same job runs at the 2B language model's shape (the plan's ``--only C/actor-update``)."""
from __future__ import annotations

import pytest

from soft_spatial.bench.gpu import actor_update
from soft_spatial.bench.gpu.context import KitContext


def test_each_mode_is_timed_in_its_own_process_on_a_device():
    """Each mode's peak memory is its own only in a fresh process; a dry run (no memory measured)
    times all three in one, and the child refuses a mode it does not know, naming it."""
    assert actor_update.process_groups(False) == [("hard",), ("soft_fixed",), ("adaptsoft",)]
    assert actor_update.process_groups(True) == [actor_update.MODES]
    assert actor_update.MODES[0] == "hard"
    with pytest.raises(SystemExit, match=r"unknown mode\(s\) \['sofft'\]"):
        actor_update.main(["hard,sofft", "m", "b", "--dry-run"])


def test_a_failed_mode_is_reported_with_its_error():
    r = actor_update.ActorResult(2.03, 8, 1024, False, errors={"adaptsoft": "CUDA out of memory"})
    r.modes["hard"] = {"time_s": 2.8, "min_s": 2.5, "peak_mib": 15500.0,
                       "max_allocated_mib": 38830.0, "repeats": 5}
    text = "\n".join(actor_update.render(r))
    assert "| hard | 2.8 | 2.5 | 1 | 1.55e+04 | 1 | 3.883e+04 |" in text
    assert "adaptsoft failed:\n```\nCUDA out of memory\n```" in text


@pytest.mark.slow
def test_the_dry_run_updates_in_every_mode(tmp_path):
    ctx = KitContext(dry_run=True, device="cpu", work=tmp_path, out=tmp_path, deadline_at=0.0,
                     report=None)
    r = actor_update.measure(ctx, None)
    assert list(r.modes) == ["hard", "soft_fixed", "adaptsoft"] and not r.errors
    assert all(m["time_s"] > 0 and m["repeats"] == 1 for m in r.modes.values())
    text = "\n".join(actor_update.render(r))
    for mode in actor_update.MODES:
        assert f"| {mode} |" in text
