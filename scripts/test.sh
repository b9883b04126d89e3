#!/usr/bin/env bash
# The test command: sets up .venv (idempotent) and runs the CPU test suite.
#   bash scripts/test.sh [pytest args...]     e.g. bash scripts/test.sh -m "not slow"
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$ROOT/scripts/setup.sh"
cd "$ROOT"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export RAY_USAGE_STATS_ENABLED=0
exec "$ROOT/.venv/bin/python" -m pytest tests "$@"
