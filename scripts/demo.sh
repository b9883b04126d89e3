#!/usr/bin/env bash
# The main job on a laptop-class CPU: sets up .venv (idempotent), builds a tiny random Qwen3-VL
# with the real Qwen vocabulary and fixture benchmarks in their published layouts, then evaluates
# soft thinking (fixed tau) on all three with python -m soft_spatial.eval and prints where the
# per-sample results, summary and tables are.
#   bash scripts/demo.sh [extra eval overrides, e.g. mode=hard samples=2]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$ROOT/scripts/setup.sh"
cd "$ROOT"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
PY="$ROOT/.venv/bin/python"
RUN="${RUN_DIR:-$ROOT/runs/demo}"
mkdir -p "$RUN"
[[ -f "$RUN/model/config.json" ]] || "$PY" -m soft_spatial.models.tiny --out "$RUN/model" --family qwen3_vl --vocab qwen
[[ -d "$RUN/fixtures/omnispatial" ]] || "$PY" scripts/make_fixtures.py "$RUN/fixtures"
"$PY" -m soft_spatial.eval \
  "benchmarks=[omnispatial,spatialab,mindcube]" \
  "data.omnispatial=$RUN/fixtures/omnispatial" \
  "data.spatialab=$RUN/fixtures/spatialab/spatialab.parquet" \
  "data.mindcube=$RUN/fixtures/mindcube" \
  "model.path=$RUN/model" model.name=tiny mode=fixed samples=4 max_new_tokens=64 \
  "output_dir=$RUN/eval" "$@"
echo "demo done: tables in $RUN/eval/*.md"
