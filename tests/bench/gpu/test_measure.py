"""How the GPU kit measures on a device (soft_spatial/bench/gpu/measure.py), on the CPU: timing takes
the median and the minimum of the repeats after the warm-up calls and returns the last result;
random models are drawn from their seed on the asked device and dtype; the versions line names
every package."""
from __future__ import annotations

import torch

from soft_spatial.bench.gpu import measure


def test_timed_reports_the_median_and_minimum_of_the_repeats_after_the_warm_up(monkeypatch):
    calls = []
    clock = iter([0.0, 3.0, 10.0, 11.0, 20.0, 22.0, 30.0, 40.0])  # repeats of 3, 1, 2 and 10 s
    monkeypatch.setattr(measure.time, "perf_counter", lambda: next(clock))
    median, fastest, out = measure.timed(lambda: calls.append(len(calls)) or len(calls), "cpu",
                                         repeats=4, warmup=2)
    assert (median, fastest) == (2.5, 1.0) and out == 6 and calls == list(range(6))


def test_a_random_model_is_its_seeds_on_the_asked_device_and_dtype():
    from transformers import Qwen3Config

    config = Qwen3Config(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, head_dim=8)
    a = measure.random_model(config, "cpu", torch.bfloat16, seed=3)
    b = measure.random_model(config, "cpu", torch.bfloat16, seed=3)
    c = measure.random_model(config, "cpu", torch.bfloat16, seed=4)
    assert not a.training and {p.dtype for p in a.parameters()} == {torch.bfloat16}
    assert {p.device.type for p in a.parameters()} == {"cpu"}
    sa, sb, sc = a.state_dict(), b.state_dict(), c.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert not all(torch.equal(sa[k], sc[k]) for k in sa)


def test_versions_name_every_package_and_the_cpu_has_no_peak():
    import platform

    line = measure.versions()
    parts = line.split(", ")
    assert parts[0] == f"Python {platform.python_version()}" and f"torch {torch.__version__}" in parts
    assert [p.split(" ")[0] for p in parts[1:]] == ["torch", "transformers", "verl", "ray", "sglang"]
    with measure.PeakMemory("cpu") as peak:
        torch.ones(1000)
    assert peak.mib != peak.mib  # NaN: nothing is measured off CUDA
