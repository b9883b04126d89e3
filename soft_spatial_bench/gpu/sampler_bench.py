"""X/sampler — the soft sampler's decode step without an engine, eager against graphed.

For each mode (hard, fixed, adaptsoft) and 8 and 64 rows (sizes the sampler captures exactly, so
a graphed step and an eager one are the same shapes): requests started by one prefill, then
decode steps through :meth:`SoftRuntime.sample` with their request-pool slots on the device, once
eagerly (the device path) and once through the captured graphs
(:class:`~soft_spatial.engines.sglang.sampler_graph.SamplerGraphs`), same logits, hidden states,
seeds. Per step: the host's wall time of the call (what it costs to launch: nothing waits for the
device) and the device's span between events recorded around it; and the records and tokens of
the graphed steps against the eager ones, which must be equal bit for bit (the job fails naming
the first step and field that differ). The Qwen vocabulary and Qwen3-VL-2B's hidden width on a
GPU; a dry run runs the static path without a graph on the CPU at tiny sizes. First, the fused
noise kernel (:mod:`soft_spatial.engines.sglang.noise_kernel`) against the PyTorch ops on the
device: the job fails before timing anything if a single bit differs.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from types import SimpleNamespace

import torch

from soft_spatial_bench.gpu.measure import MODES
from soft_spatial_bench.gpu.report import JobFailed, table

__all__ = ["SamplerResult", "measure", "render", "SIZES"]

SIZES = (8, 64)


@dataclass
class SamplerResult:
    """X/sampler's result: the noise kernel's check; per mode, size and path (eager, graphed) the
    median launch and device µs; the first graphed record unlike the eager one (None: none)."""

    noise: dict
    device: str = ""
    vocab: int = 0
    hidden: int = 0
    steps: int = 0
    rows: list = field(default_factory=list)
    mismatch: str | None = None


def _reqs(n: int, tag: str):
    from soft_spatial.engines.sglang.client import PARAM_KEY, request_params
    from soft_spatial.softthink import SamplingConfig
    out = []
    for i in range(n):
        sp = SimpleNamespace(custom_params={PARAM_KEY: request_params(500 + i, SamplingConfig())},
                             temperature=1.0, top_k=-1, top_p=1.0)
        out.append(SimpleNamespace(rid=f"{tag}{i}", output_ids=[], is_chunked=0,
                                   sampling_params=sp, req_pool_idx=i + 1))
    return out


def _runtime(mode: str, vocab: int, hidden: int, graphs: bool, capture: bool):
    from soft_spatial_bench.workloads import random_controller
    from soft_spatial.engines.sglang.runtime import SoftRuntime
    from soft_spatial.engines.sglang.server_args import SchedulerSetup
    from soft_spatial.softthink import SoftThinkingConfig
    from soft_spatial.softthink.settings import SoftSettings
    soft = SoftThinkingConfig(mode=mode)
    rt = SoftRuntime(SchedulerSetup(soft=SoftSettings(soft_thinking=soft, seed=0),
                                    hidden_size=hidden, think_end_id=5 if soft.is_soft else None,
                                    banned_ids=[vocab - 1]))
    rt.device_path = True
    if mode == "adaptsoft":
        rt.set_controller(random_controller(hidden, seed=1).to_state())
    if graphs:
        rt.use_graphs(SIZES, capture=capture)
    return rt


def _timed(rt, reqs, logits, hidden, slots, dev):
    """(host µs of the call, device µs between events around it, tokens, records)."""
    if dev.type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
    t0 = time.perf_counter()
    tokens, info = rt.sample(reqs, logits, hidden, pool_rows=max(SIZES) + 1, slots=slots)
    host = (time.perf_counter() - t0) * 1e6
    if dev.type == "cuda":
        end.record()
        end.synchronize()
        device = start.elapsed_time(end) * 1e3
    else:
        device = host
    from soft_spatial.engines.sglang.records import RECORD_KEY
    return host, device, tokens, list(info[RECORD_KEY])


def noise_check(dev) -> dict:
    """The fused noise kernel against the PyTorch ops on ``dev`` (the noise contract's bits):
    ``{"fused": whether it runs there, "equal": same uniforms and steps}``."""
    from soft_spatial.engines.sglang.noise_kernel import (fused_available, slot_uniforms,
                                                          slot_uniforms_torch)
    from soft_spatial.softthink.noise import premix_seed, seed_tensor
    g = torch.Generator().manual_seed(1)
    seeds = seed_tensor([0, 2**63, 2**64 - 1] + torch.randint(0, 2**62, (253,),
                                                              generator=g).tolist())
    table = premix_seed(seeds).to(dev)
    steps = torch.randint(0, 2**40, (256,), generator=g).to(dev)
    slots = torch.randperm(256, generator=g)[:64].to(dev)
    s1, s2 = steps.clone(), steps.clone()
    (u1, r1), (u2, r2) = slot_uniforms(table, s1, slots, 6), slot_uniforms_torch(table, s2,
                                                                                 slots, 6)
    equal = torch.equal(u1, u2) and torch.equal(r1, r2) and torch.equal(s1, s2)
    return {"fused": fused_available(dev), "equal": bool(equal)}


def measure(ctx, job) -> SamplerResult:
    dry = ctx.dry_run
    dev = torch.device("cpu" if dry else "cuda")
    vocab, hidden, steps = (97, 16, 6) if dry else (151936, 2048, 60)
    rows_out, mismatch = [], None
    noise = noise_check(dev)
    if not noise["equal"]:
        raise JobFailed("the fused noise kernel's uniforms differ from the noise contract's",
                        SamplerResult(noise))
    g = torch.Generator().manual_seed(0)
    for mode in MODES:
        for n in SIZES:
            rts = {path: _runtime(mode, vocab, hidden, path == "graphed", capture=not dry)
                   for path in ("eager", "graphed")}
            reqs = {path: _reqs(n, path) for path in rts}
            slots = torch.arange(1, n + 1).to(dev)
            first = torch.randn(n, vocab, generator=g).to(dev)
            h0 = torch.randn(n, hidden, generator=g).to(dev)
            for path, rt in rts.items():
                rt.sample(reqs[path], first, h0, pool_rows=max(SIZES) + 1, extend=True)
            times = {path: ([], []) for path in rts}
            for t in range(steps + 2):  # two warm-up steps (the graphs' capture)
                logits = (torch.randn(n, vocab, generator=g) * 3).to(dev)
                hidden_t = torch.randn(n, hidden, generator=g).to(dev)
                outs = {}
                for path, rt in rts.items():
                    host, device, tokens, records = _timed(rt, reqs[path], logits.clone(),
                                                           hidden_t, slots, dev)
                    outs[path] = (tokens.cpu(), records)
                    if t >= 2:
                        times[path][0].append(host)
                        times[path][1].append(device)
                (te, re), (tg, rg) = outs["eager"], outs["graphed"]
                if mismatch is None and (not torch.equal(te, tg) or re != rg):
                    bad = next((i for i, (a, b) in enumerate(zip(re, rg)) if a != b), None)
                    mismatch = f"{mode}, {n} rows, step {t}: row {bad}'s record differs"
            for path in rts:
                rows_out.append({"mode": mode, "rows": n, "path": path,
                                 "launch_us": round(statistics.median(times[path][0]), 1),
                                 "device_us": round(statistics.median(times[path][1]), 1)})
            rows_out[-1]["stats"] = dict(rts["graphed"].stats)
    r = SamplerResult(noise, str(dev), vocab, hidden, steps, rows_out, mismatch)
    if mismatch:
        raise JobFailed(f"the graphed sampler's records differ from the eager ones: {mismatch}", r)
    return r


def render(v: SamplerResult) -> list[str]:
    by = {(r["mode"], r["rows"], r["path"]): r for r in v.rows}
    lines = [f"The soft sampler's decode step without an engine (vocabulary {v.vocab}, hidden "
             f"{v.hidden}, {v.steps} steps, on {v.device}): host µs to launch it and the "
             f"device's span, eager against the captured graphs; graphed records equal to the "
             f"eager ones bit for bit: {'yes' if not v.mismatch else 'no, ' + v.mismatch}; "
             f"noise drawn by the fused kernel: {'yes' if v.noise['fused'] else 'no (ops)'}, "
             f"its bits the contract's: {'yes' if v.noise['equal'] else 'no'}", ""]
    rows = []
    for mode in MODES:
        for n in SIZES:
            e, g = by.get((mode, n, "eager")), by.get((mode, n, "graphed"))
            if e and g:
                rows.append([mode, n, e["launch_us"], g["launch_us"],
                             f"{e['launch_us'] / max(g['launch_us'], 1e-9):.1f}x",
                             e["device_us"], g["device_us"]])
    return lines + table(["mode", "rows", "eager launch µs", "graphed launch µs", "launch ratio",
                          "eager device µs", "graphed device µs"], rows)
