"""Time and peak memory of one actor update: hard vs soft_fixed vs adaptsoft, same batch.

    python scripts/bench_update.py [--vocab small|qwen] [--steps 32] [--rows 8] [--repeats 3]

One FSDP2 engine on one gloo process (verl's real engine and our soft engine), a tiny Qwen3
text model, rollouts from the embedded engine. `hard` is verl's stock engine (model type
language_model) on the spines of the same rollouts; `soft_fixed` replays the soft inputs and
scores Gumbel densities; `adaptsoft` adds the controller's gradient-alignment pass. Each
measurement runs in a fresh subprocess; peak memory is the growth of the process's maximum
resident set size during the update (`ru_maxrss`). Goals: adaptsoft <= 1.5x hard time and
<= 1.2x hard peak memory.
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

ROOT = Path(__file__).resolve().parents[1]


def _child(mode: str, model: str, rows: int, steps: int, repeats: int) -> dict:
    os.environ.setdefault("VERL_PLATFORM", "cpu")
    sys.path.insert(0, str(ROOT / "tests"))
    import tempfile as tf

    import torch
    import test_actor_helpers as H  # shared with the actor tests: batches and real engines

    from soft_spatial.actor.adaptsoft_trainer import AdaptSoftTrainer
    from soft_spatial.actor.loss import soft_ppo_loss
    from soft_spatial.trainer.platform import init_process_group, use_cpu_platform

    use_cpu_platform()
    init_process_group(0, 1, "file://" + tf.mktemp())
    import json as _json
    ctrl = H.trained_controller(_json.load(open(os.path.join(model, "config.json")))["hidden_size"])
    H.PROMPTS[:] = [[5 + i, 9, 13, 40 + i, 41, 42, 7, 8] for i in range(rows // 2)]
    _, prompts, outs, _ = H.rollouts(model, n=2, max_new_tokens=steps, mode="adaptsoft",
                                     controller=ctrl)
    if mode == "hard":
        from soft_spatial.softthink import SoftTrace
        for o in outs:  # the same tokens, as a discrete chain of thought
            o.trace = SoftTrace.discrete(o.token_ids, o.trace.k, o.trace.feature_dim)
    engine = H.make_engine(model, model_type="language_model" if mode == "hard"
                           else "soft_language_model")
    if mode == "adaptsoft":
        engine.configure_soft(adaptsoft=AdaptSoftTrainer(copy.deepcopy(ctrl), seed=1))
    td = H.train_batch_td(engine, prompts, outs, micro_batch_size=len(outs))
    loss = partial(soft_ppo_loss, config=H.actor_config())
    times = []
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    for _ in range(repeats + 1):  # the first update is a warm-up
        t0 = time.perf_counter()
        with engine.train_mode():
            engine.train_batch(td, loss)
        times.append(time.perf_counter() - t0)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base
    return {"time_s": sorted(times[1:])[len(times[1:]) // 2], "peak_mib": peak / 1024,
            "tokens": sum(len(o.token_ids) for o in outs)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--vocab", default="small", choices=["small", "qwen"])
    ap.add_argument("--rows", type=int, default=8)
    ap.add_argument("--steps", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--hidden", type=int, default=256, help="hidden size of the tiny model")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--child", nargs=5, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        mode, model, rows, steps, repeats = a.child
        print(json.dumps(_child(mode, model, int(rows), int(steps), int(repeats))))
        return
    from soft_spatial.models import build_tiny_model
    model = Path(tempfile.mkdtemp()) / "tiny_text"
    build_tiny_model(model, family="qwen3", vocab=a.vocab, hidden_size=a.hidden,
                     intermediate_size=2 * a.hidden, num_hidden_layers=a.layers,
                     head_dim=a.hidden // 4)
    results = {}
    for mode in ("hard", "soft_fixed", "adaptsoft"):
        res = subprocess.run([sys.executable, __file__, "--child", mode, str(model), str(a.rows),
                              str(a.steps), str(a.repeats)], capture_output=True, text=True)
        if res.returncode != 0:
            raise SystemExit(f"{mode} failed:\n{res.stderr[-3000:]}")
        results[mode] = json.loads(res.stdout.strip().splitlines()[-1])
    h = results["hard"]
    print(f"tiny Qwen3 ({a.vocab} vocab, hidden {a.hidden}, {a.layers} layers), {a.rows} "
          f"sequences × {a.steps} response tokens, median of {a.repeats} updates")
    print(f"{'mode':>11} {'update s':>9} {'× hard':>7} {'peak MiB':>9} {'× hard':>7}")
    for mode, r in results.items():
        print(f"{mode:>11} {r['time_s']:9.3f} {r['time_s'] / h['time_s']:7.2f} "
              f"{r['peak_mib']:9.1f} {r['peak_mib'] / max(h['peak_mib'], 1e-3):7.2f}")


if __name__ == "__main__":
    main()
