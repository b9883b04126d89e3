#!/usr/bin/env bash
# The main job on a laptop-class CPU: GRPO with soft thinking and AdaptSoft on a synthetic
# spatial benchmark (python -m soft_spatial.lab.learning budget=demo; docs/learning.md says how it
# runs, docs/results/learning.md what it shows today):
#   1. set up .venv (idempotent);
#   2. render the synthetic benchmark (OmniSpatial layout) and build a tiny Qwen3-VL;
#   3. warm-start it with a short supervised loop, then evaluate the warm start;
#   4. train adaptsoft with GRPO through verl's trainer (python -m soft_spatial.train);
#   5. evaluate the trained policy and print accuracy before and after, with a 95% CI, and
#      where the table and the plots are.
# A finished stage is not redone when the command runs again.
#   bash scripts/demo.sh [seed=1] [budget=full] [out=DIR] [any key of configs/learning/learn.yaml]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$ROOT/scripts/setup.sh"
cd "$ROOT"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false RAY_USAGE_STATS_ENABLED=0
exec "$ROOT/.venv/bin/python" -m soft_spatial.lab.learning budget=demo "$@"
