#!/usr/bin/env bash
# The main job on a laptop-class CPU, end to end (about 5-10 minutes on 2 cores):
#   1. set up .venv (idempotent);
#   2. build a tiny random Qwen3-VL with the real Qwen vocabulary and fixture benchmarks in their
#      published layouts, and the verl training parquet from the OmniSpatial train fixture;
#   3. train soft thinking with AdaptSoft through verl's trainer (python -m soft_spatial.train,
#      experiment=adaptsoft, cluster=cpu) for a few steps;
#   4. export the final checkpoint (python -m soft_spatial.export: verl's merger + controller +
#      soft settings in one directory) and evaluate it on the OmniSpatial test fixture;
#   5. print where the checkpoint, the metrics and the table are.
#   bash scripts/demo.sh [extra training overrides, e.g. experiment=soft_fixed]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$ROOT/scripts/setup.sh"
cd "$ROOT"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false RAY_USAGE_STATS_ENABLED=0
PY="$ROOT/.venv/bin/python"
RUN="${RUN_DIR:-$ROOT/runs/demo}"
STEPS="${STEPS:-2}"
mkdir -p "$RUN"
echo "== 1/4 data and model in $RUN"
[[ -f "$RUN/model/config.json" ]] || "$PY" -m soft_spatial.models.tiny --out "$RUN/model" --family qwen3_vl --vocab qwen
[[ -d "$RUN/fixtures/omnispatial" ]] || "$PY" scripts/make_fixtures.py "$RUN/fixtures" >/dev/null
for split in train test; do
  [[ -f "$RUN/data/$split.parquet" ]] || "$PY" -m soft_spatial.data.prepare --benchmark omnispatial \
    --root "$RUN/fixtures/omnispatial" --split "$split" --out "$RUN/data/$split.parquet" --processor "$RUN/model"
done
echo "== 2/4 training ($STEPS steps, adaptsoft, CPU)"
rm -rf "$RUN/checkpoints"
"$PY" -m soft_spatial.train model=tiny cluster=cpu "model.path=$RUN/model" \
  "data.train_files=$RUN/data/train.parquet" "data.val_files=$RUN/data/test.parquet" \
  "trainer.total_training_steps=$STEPS" "trainer.save_freq=$STEPS" \
  "trainer.default_local_dir=$RUN/checkpoints" "$@" >"$RUN/train.log" 2>&1 || { echo "training failed, see $RUN/train.log" >&2; exit 1; }
"$PY" scripts/metrics_summary.py "$RUN/checkpoints/metrics.jsonl"
STEP="$(cat "$RUN/checkpoints/latest_checkpointed_iteration.txt")"
echo "== 3/4 exporting global_step_$STEP (weights, controller, soft settings) to $RUN/final"
"$PY" -m soft_spatial.export "$RUN/checkpoints" "$RUN/final" --overwrite >"$RUN/export.log" 2>&1 \
  || { echo "export failed, see $RUN/export.log" >&2; exit 1; }
echo "== 4/4 evaluating the exported model (its mode and controller come with it)"
"$PY" -m soft_spatial.eval "benchmarks=[omnispatial]" "data.omnispatial=$RUN/fixtures/omnispatial" \
  "model.path=$RUN/final" model.name=tiny-trained samples=2 \
  max_new_tokens=64 "output_dir=$RUN/eval" 2>&1 | grep -v -i "warn" | tail -4
echo
echo "checkpoint: $RUN/checkpoints/global_step_$STEP (exported model: $RUN/final)"
echo "metrics:    $RUN/checkpoints/metrics.jsonl"
echo "table:      $RUN/eval/omnispatial.md"
