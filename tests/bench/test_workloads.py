"""The timing statistics of the benchmarks (`soft_spatial_bench.workloads`), on a fake clock: no wall time
is asserted anywhere."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

import soft_spatial_bench.workloads as bench
from soft_spatial_bench.workloads import Timing, calls_for, interleaved, mean_seconds, paired_ratio, ratio_lines


class FakeClock:
    """``perf_counter`` that only moves when a call of the measured function advances it."""

    def __init__(self):
        self.now = 0.0
        self.calls = 0

    def perf_counter(self):
        return self.now

    def work(self, seconds):
        def fn():
            self.calls += 1
            self.now += seconds
        return fn


@pytest.fixture
def clock(monkeypatch):
    c = FakeClock()
    monkeypatch.setattr(bench, "time", SimpleNamespace(perf_counter=c.perf_counter))
    return c


def test_timing_statistics():
    t = Timing([3.0, 1.0, 2.0, 10.0])
    assert t.min == 1.0
    assert t.median == 2.5
    assert t.spread == pytest.approx((10.0 - 1.0) / 2.5)
    assert Timing([2.0, 2.0]).spread == 0.0


def test_interleaved_rotates_the_order_and_measures_every_mode_every_repeat():
    order = []

    def measure(mode, rep):
        order.append((rep, mode))
        return 10 * rep + len(order)

    out = interleaved(measure, ["a", "b", "c"], 4)
    assert [m for _, m in order] == list("abc" "bca" "cab" "abc")
    assert [r for r, _ in order] == [0] * 3 + [1] * 3 + [2] * 3 + [3] * 3
    assert list(out) == ["a", "b", "c"]  # in the caller's order, whatever ran first
    assert out["a"].seconds == [1, 10 + 6, 20 + 8, 30 + 10]
    assert out["c"].seconds == [3, 10 + 5, 20 + 7, 30 + 12]
    # tuple modes (the reward benchmark's (callable, size)) work as well
    assert list(interleaved(lambda m, r: 1.0, [("x", 1), ("x", 2)], 2)) == [("x", 1), ("x", 2)]


def test_mean_seconds_is_the_mean_over_consecutive_calls(clock):
    assert mean_seconds(clock.work(0.25), 8) == pytest.approx(0.25)
    assert clock.calls == 8
    assert mean_seconds(clock.work(0.5)) == pytest.approx(0.5)
    assert clock.calls == 9


@pytest.mark.parametrize("cost,min_seconds", [(0.001, 0.2), (0.03, 0.1), (0.07, 0.1),
                                              (1e-6, 0.5)])
def test_calls_for_fills_the_minimum_time(clock, cost, min_seconds):
    n = calls_for(clock.work(cost), min_seconds)
    assert n * cost >= min_seconds  # enough work per measurement
    assert (n / 2) * cost < 1.3 * min_seconds  # ...but not far more than needed
    assert clock.calls < 4 * n  # counting costs a few measurements at most


def test_calls_for_respects_the_cap_and_a_slow_function(clock):
    assert calls_for(clock.work(1e-9), 1.0, max_calls=64) == 64
    assert calls_for(clock.work(2.0), 0.1) == 1
    assert clock.calls <= 64 + 32 + 1  # at most doubling towards the cap, then the slow call


def test_ratio_lines_report_min_median_spread_and_both_ratios():
    timings = {"hard": Timing([2.0, 4.0, 3.0]), "a long mode name": Timing([5.0, 9.0, 6.0])}
    header, hard, other = ratio_lines(timings, "hard")
    assert header.split()[:5] == ["mode", "min", "s", "median", "s"]
    assert hard.split() == ["hard", "2", "3", "66.7%", "1.000", "1.000", "1.000"]
    # min 5, median 6, spread (9 - 5) / 6, ratios 5/2 of the minima and 6/3 of the medians
    # paired: per turn 5/2, 9/4, 6/3 -> median 2.25
    assert other.split()[-6:] == ["5", "6", "66.7%", "2.500", "2.000", "2.250"]
    assert other.startswith("a long mode name")
    assert len({len(header), len(hard), len(other)}) == 1  # columns aligned


def test_paired_ratio_cancels_drift_between_turns():
    """The machine is slow in turn 2 for both modes: the ratio of medians mixes turns (2.6), the
    median of the per-turn ratios does not (2.0)."""
    base, mode = Timing([1.0, 2.0, 1.0]), Timing([2.0, 4.0, 2.6])
    assert mode.median / base.median == pytest.approx(2.6)
    assert paired_ratio(mode, base) == pytest.approx(2.0)
    with pytest.raises(ValueError):
        paired_ratio(Timing([1.0]), base)  # every turn has both modes


def test_tensor_memory_counts_new_storages_until_they_are_freed():
    from soft_spatial_bench.workloads import TensorMemory

    before = torch.zeros(10_000)  # made before the block: never counted
    with TensorMemory() as mem:
        a = torch.zeros(1000)                          # 4000 bytes
        b = torch.ones(250, dtype=torch.float64)       # 2000
        a.add_(1)                                      # in place: nothing new
        views = (a[:10], a.view(-1), a.view(10, 100).T, before[5:])  # views: nothing new
        x, y = torch.split(a * 2, 500)                 # one new 4000-byte storage, two views
        before.mul_(3)
        assert (mem.live, mem.peak) == (10_000, 10_000)
        del a, views                                   # a and its views: its storage is freed
        assert mem.live == 6000
        z = torch.cat([x, y])                          # 4000 more
        del x
        assert mem.live == 10_000                      # y still holds the split's storage
        del y, b
        assert mem.live == 4000
        w = torch.empty(3, 5, dtype=torch.int16)       # 30
    assert (mem.live, mem.peak) == (4030, 10_000) and z.numel() == 1000 and w.numel() == 15


# -- the benchmark scripts still run -----------------------------------------------------------------
@pytest.mark.parametrize("script, args, table", [
    ("bench_decode.py", ["--vocab", "small", "--prompts", "1", "--n", "2", "--steps", "4", "--repeats", "1"],
     "fixed/hard throughput:"),
    ("bench_update.py", ["--no-memory", "--repeats", "1", "--updates", "1", "--steps", "4", "--rows", "2",
                         "--hidden", "64", "--layers", "1"],
     "min×hard"),
    ("bench_alignment.py", ["--quick", "--naive-steps", "2", "--naive-max-bytes", "1e7", "--repeats", "1",
                            "--min-seconds", "0.01"], "ours peak"),
    ("bench_reward.py", ["--mb", "0.01", "--repeats", "1", "--min-seconds", "0.01"], "**slowest**"),
])
def test_a_benchmark_script_runs_at_its_smallest_size(script, args, table):
    """Each CPU benchmark runs against today's package (bench_update.py once lost the plugin's
    registration of the soft_grpo loss and nothing noticed): exit 0 and its table printed. Its
    timings are not looked at."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONPATH=str(root))
    res = subprocess.run([sys.executable, str(root / "scripts" / script), *args], capture_output=True,
                         text=True, cwd=root, env=env, timeout=600)
    assert res.returncode == 0, (res.stdout + res.stderr)[-3000:]
    assert table in res.stdout, res.stdout[-3000:]
