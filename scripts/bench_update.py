"""Time and peak memory of one actor update: hard vs soft_fixed vs adaptsoft, same batch.

    python scripts/bench_update.py [--vocab small|qwen] [--steps 32] [--rows 8] [--repeats 5]
                                   [--updates 3] [--no-memory]

verl's real FSDP2 engines on one gloo process, a tiny Qwen3 text model, rollouts from the
embedded engine (workloads from `soft_spatial_bench.workloads`). `hard` is verl's stock engine (model type
language_model) on the spines of the same rollouts; `soft_fixed` replays the soft inputs and
scores Gumbel densities; `adaptsoft` adds the controller's gradient-alignment pass.

Time: the three engines live in one process and are measured in turns, the order rotating every
repeat (so a slow spell of a shared machine hits every mode alike); one measurement is the mean of
``--updates`` consecutive updates after a warm-up update per engine. Printed: min, median and
spread ((max - min) / median) per mode and the ratios to hard of the minima, of the medians and paired per turn.
Peak memory: one fresh subprocess per mode (growth of ``ru_maxrss`` during its updates).
Goals: adaptsoft <= 1.5x hard time and <= 1.2x hard peak memory. Reproducing a ratio to ±10%
needs a quiet machine: on a shared one, compare the minima.
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

MODES = ("hard", "soft_fixed", "adaptsoft")


def _setup(model: str, rows: int, steps: int, modes):
    """Rollouts once, then per mode (train_engine, batch); the hard batch has discrete traces."""
    os.environ.setdefault("VERL_PLATFORM", "cpu")
    import soft_spatial_bench.workloads as B
    from soft_spatial.actor.adaptsoft_trainer import AdaptSoftTrainer
    from soft_spatial.softthink import SoftTrace
    from soft_spatial.integration.platform import init_process_group, use_cpu_platform

    use_cpu_platform()
    from soft_spatial.plugin import register
    register()  # the soft_grpo policy loss and the soft engine, as in every verl process of a run
    init_process_group(0, 1, "file://" + tempfile.mktemp())
    ctrl = B.random_controller(json.load(open(os.path.join(model, "config.json")))["hidden_size"])
    prompt_ids = [[5 + i, 9, 13, 40 + i, 41, 42, 7, 8] for i in range(rows // 2)]
    _, prompts, outs, _ = B.rollouts(model, n=2, max_new_tokens=steps, mode="adaptsoft",
                                     controller=ctrl, prompts=prompt_ids)
    hard_outs = copy.deepcopy(outs)
    for o in hard_outs:  # the same tokens, as a discrete chain of thought
        o.trace = SoftTrace.discrete(o.token_ids, o.trace.k, o.trace.feature_dim)
    work = {}
    for mode in modes:
        train_engine = B.make_train_engine(model, model_type="language_model" if mode == "hard"
                               else "soft_language_model")
        if mode == "adaptsoft":
            train_engine.configure_soft(adaptsoft=AdaptSoftTrainer(copy.deepcopy(ctrl), seed=1))
        batch = B.train_batch_td(train_engine, prompts, hard_outs if mode == "hard" else outs,
                                 micro_batch_size=len(outs))
        work[mode] = (train_engine, batch)
    from soft_spatial.actor.loss import soft_ppo_loss
    loss = partial(soft_ppo_loss, config=B.actor_config())
    return work, loss, sum(len(o.token_ids) for o in outs)


def _update(work, loss, mode: str, updates: int) -> float:
    train_engine, batch = work[mode]
    t0 = time.perf_counter()
    for _ in range(updates):
        with train_engine.train_mode():
            train_engine.train_batch(batch, loss)
    return (time.perf_counter() - t0) / updates


def time_modes(model: str, rows: int, steps: int, repeats: int, updates: int) -> dict:
    from soft_spatial_bench.workloads import interleaved

    work, loss, tokens = _setup(model, rows, steps, MODES)
    for mode in MODES:  # warm-up
        _update(work, loss, mode, 1)
    timings = interleaved(lambda mode, _: _update(work, loss, mode, updates), MODES, repeats)
    return {"tokens": tokens, "seconds": {m: t.seconds for m, t in timings.items()}}


def memory_of(mode: str, model: str, rows: int, steps: int, updates: int) -> float:
    """MiB of resident-set growth during ``updates`` updates of ``mode`` (in this process)."""
    work, loss, _ = _setup(model, rows, steps, (mode,))
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    _update(work, loss, mode, updates + 1)
    return (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) / 1024


def _child(args) -> None:
    kind, model, rows, steps, repeats, updates = args
    rows, steps, repeats, updates = int(rows), int(steps), int(repeats), int(updates)
    if kind == "time":
        out = time_modes(model, rows, steps, repeats, updates)
    else:
        out = {"peak_mib": memory_of(kind, model, rows, steps, updates)}
    print(json.dumps(out))


def _run_child(*args) -> dict:
    res = subprocess.run([sys.executable, __file__, "--child", *map(str, args)],
                         capture_output=True, text=True)
    if res.returncode != 0:
        raise SystemExit(f"{args[0]} failed:\n{res.stderr[-3000:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--vocab", default="small", choices=["small", "qwen"])
    ap.add_argument("--rows", type=int, default=8)
    ap.add_argument("--steps", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=5, help="turns of the three modes")
    ap.add_argument("--updates", type=int, default=3, help="updates per measurement")
    ap.add_argument("--hidden", type=int, default=256, help="hidden size of the tiny model")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--no-memory", action="store_true", help="skip the per-mode memory subprocesses")
    ap.add_argument("--child", nargs=6, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        _child(a.child)
        return
    from soft_spatial_bench.workloads import Timing, ratio_lines
    from soft_spatial.models import build_tiny_model

    model = Path(tempfile.mkdtemp()) / "tiny_text"
    build_tiny_model(model, family="qwen3", vocab=a.vocab, hidden_size=a.hidden,
                     intermediate_size=2 * a.hidden, num_hidden_layers=a.layers,
                     head_dim=a.hidden // 4)
    timed = _run_child("time", model, a.rows, a.steps, a.repeats, a.updates)
    timings = {m: Timing(s) for m, s in timed["seconds"].items()}
    print(f"tiny Qwen3 ({a.vocab} vocab, hidden {a.hidden}, {a.layers} layers), {a.rows} sequences "
          f"× {a.steps} response tokens; {a.repeats} interleaved turns, each the mean of "
          f"{a.updates} updates")
    print("\n".join(ratio_lines(timings, "hard")))
    if not a.no_memory:
        peaks = {m: _run_child(m, model, a.rows, a.steps, 1, a.updates)["peak_mib"] for m in MODES}
        print("peak MiB: " + ", ".join(f"{m} {p:.1f} ({p / max(peaks['hard'], 1e-3):.2f}× hard)"
                                       for m, p in peaks.items()))


if __name__ == "__main__":
    main()
