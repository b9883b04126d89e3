"""The soft plugin's host work per decode step against stock SGLang's, on this CPU, in one run
(docs/sglang.md, "The sampler's host work"; what is measured: soft_spatial_bench/sampler.py).

    bash scripts/setup_sglang_overlay.sh                          # once
    .venv/bin/python scripts/bench_sampler.py                     # every row, about 5 min on 2 cores
    .venv/bin/python scripts/bench_sampler.py --json rows.json    # also one object per row
    .venv/bin/python scripts/bench_sampler.py --no-engine         # the step alone (1 min)

For stock SGLang's sampler and the plugin in hard, fixed and adaptsoft at 8 and 64 rows: the ops
dispatched per decode step outside a captured sampler graph, the copies a device would make
between host and device, Python calls and soft_spatial lines per step (the same at 8 and 64 rows
when nothing loops over the rows), host µs per step and its ratio to stock's, the
``customized_info`` keys SGLang collects per row, garbage collections; then, from the real CPU
engine (one per implementation, SGLang's scheduler timing its decode steps), the host µs per step
outside the model's forward and its ratio to stock's. The model: the tiny Qwen3-VL with the small
vocabulary (576 ids), fp32, where dispatch, not arithmetic, is the step's cost, as on a GPU.
"""
from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path

from soft_spatial_bench.overlay import reexec_with_sglang_overlay


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", type=Path, help="write one object per measured row here")
    ap.add_argument("--steps", type=int, default=200, help="timed steps per row (step alone)")
    ap.add_argument("--engine-steps", type=int, default=48, help="decode steps per generate")
    ap.add_argument("--turns", type=int, default=3, help="generates of each size per engine")
    ap.add_argument("--no-engine", action="store_true", help="skip the real CPU engine")
    a = ap.parse_args()
    reexec_with_sglang_overlay("bench_sampler")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch
    torch.set_num_threads(1)
    from transformers import AutoConfig, AutoTokenizer

    from soft_spatial_bench.sampler import (IMPLS, ROWS, count_step, measure_engines,
                                            rows_json, sglang_setup, time_steps)
    from soft_spatial_bench.workloads import random_controller
    from soft_spatial.models import build_tiny_model, think_end_id

    work = Path(tempfile.mkdtemp(prefix="bench_sampler_"))
    model = str(build_tiny_model(work / "tiny", family="qwen3_vl", vocab="small"))
    cfg = AutoConfig.from_pretrained(model).text_config
    vocab, hidden = cfg.vocab_size, cfg.hidden_size
    think_end = think_end_id(AutoTokenizer.from_pretrained(model))
    sglang_setup(model)
    rows = {(impl, n): count_step(impl, n, vocab, hidden, think_end)
            for n in ROWS for impl in IMPLS}
    time_steps(list(rows.values()), vocab, hidden, think_end, steps=a.steps)
    if not a.no_engine:
        ctrl = work / "controller.pt"
        random_controller(hidden, seed=1).save(ctrl)
        got = measure_engines(IMPLS, model, work, steps=a.engine_steps, turns=a.turns,
                              ctrl=str(ctrl))
        for (impl, n), row in rows.items():
            row.engine_host_us = got[impl][n]
    print(f"\nper decode step, tiny Qwen3-VL (vocabulary {vocab}, hidden {hidden}), fp32, "
          f"{os.cpu_count()} CPUs, {a.steps} timed steps in turns; engines: {a.turns} turns of "
          f"{a.engine_steps}-step generates")
    head = ("impl", "rows", "ops", "h2d", "d2h", "py calls", "our lines", "info keys", "gc/100",
            "host µs", "× stock", "engine µs", "× stock")
    print("  ".join(f"{h:>9}" for h in head))
    for (impl, n), r in rows.items():
        base = rows["stock", n]
        eng = r.engine_host_us
        cells = (impl, n, r.ops_outside_graph, r.h2d_copies, r.d2h_copies, r.python_calls,
                 r.lines, r.info_keys, r.gc_per_100_steps, r.host_us,
                 f"{r.host_us / base.host_us:.2f}", eng if eng is not None else "–",
                 f"{eng / base.engine_host_us:.2f}" if eng and base.engine_host_us else "–")
        print("  ".join(f"{c:>9}" for c in cells))
    if a.json:
        a.json.write_text(json.dumps(rows_json(list(rows.values())), indent=1) + "\n")
        print(f"\nrows: {a.json}")


if __name__ == "__main__":
    main()
