"""Print the key soft-thinking metrics of a training run: ``python scripts/metrics_summary.py
runs/demo/checkpoints/metrics.jsonl`` (verl's file logger: one JSON object per step)."""
from __future__ import annotations

import json
import sys

KEYS = ["critic/score/mean", "reward/acc_mean", "reward/format_mean", "actor/pg_loss", "actor/kl_loss",
        "actor/grad_norm",
        "soft/tau_mean", "soft/tau_std", "soft/tau_within_trace_std", "soft/entropy_mean",
        "soft/tau_entropy_corr", "soft/soft_step_fraction", "soft/think_length_mean",
        "soft/never_closed_rate", "soft/spine_match_rate", "soft/replay_max_abs_diff",
        "actor/adaptsoft/alpha_rms", "actor/adaptsoft/ema_rms", "actor/adaptsoft/kappa",
        "actor/adaptsoft/grad_norm", "actor/adaptsoft/optimizer_steps", "timing_s/step"]


def main(path: str) -> None:
    rows = [json.loads(line) for line in open(path, encoding="utf-8") if line.strip()]
    if not rows:
        raise SystemExit(f"{path}: no metrics logged")
    steps = [r.get("step", i + 1) for i, r in enumerate(rows)]
    print(f"{'metric':34}" + "".join(f"{'step ' + str(s):>12}" for s in steps))
    for key in KEYS:
        vals = [r.get("data", r).get(key) for r in rows]
        if all(v is None for v in vals):
            continue
        print(f"{key:34}" + "".join(f"{v:12.4g}" if isinstance(v, (int, float)) else f"{'–':>12}"
                                     for v in vals))


if __name__ == "__main__":
    main(sys.argv[1])
