"""F's engines (soft_spatial_bench/gpu/graphs.py) without starting one: which jobs start a warm-up
engine first. (Every F job on SGLang's real CPU engine: tests/sglang_real/test_gpu_headline_dry_run.py.)"""
from contextlib import contextmanager
from types import SimpleNamespace

from soft_spatial_bench.gpu import graphs
from soft_spatial_bench.gpu.graphs import EngineSpec


def test_a_warm_up_engine_runs_once_per_kind_on_a_device_and_never_in_a_dry_run(tmp_path,
                                                                                   monkeypatch):
    started = []

    @contextmanager
    def engine(ctx, spec, graph_log=None):
        started.append(spec)
        yield SimpleNamespace(tokens=lambda prompts, g, steps: (len(prompts) * g * steps, 0)), "model"

    monkeypatch.setattr(graphs, "engine", engine)
    monkeypatch.setattr(graphs, "text_prompts", lambda tokenizer, n, length: ["p"] * n)
    monkeypatch.setattr("transformers.AutoTokenizer.from_pretrained", lambda model: None)
    specs = [EngineSpec("stock"), EngineSpec("plugin", "fixed", overlap=True),
             EngineSpec("plugin", "adaptsoft", kernels="fused"),
             EngineSpec("plugin", "fixed", kernels="fused", model="8b"),
             EngineSpec("plugin", "fixed", kernels="fused", attention_backend="flashinfer"),
             EngineSpec("stock", kernels="fused", graphs=False)]
    # a kind is (kernels, attention, model): mode, overlap and graphs share its JIT and caches;
    # on the CPU (a dry run) every kind is warm: no JIT, one set of caches
    cases = {False: [True, False, True, True, True, False], True: [False] * 6}
    for dry, want in cases.items():
        ctx = SimpleNamespace(dry_run=dry, work=tmp_path / f"dry-{dry}")
        started.clear()
        assert [graphs.warm_up(ctx, s) is not None for s in specs] == want
        assert started == [s for s, w in zip(specs, want) if w]
        # later calls on the same machine (its marker): every kind is warm
        assert all(graphs.warm_up(ctx, s) is None for s in specs)
