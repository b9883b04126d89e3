#!/usr/bin/env bash
# The test command: sets up .venv (idempotent) and runs the CPU test suite in two pytest
# processes:
#   1. tests/ in .venv, where sglang is not importable (tests/sglang_real/ is not collected);
#   2. tests/sglang_real/ against SGLang 0.5.12's real modules: .venv plus the overlay of
#      scripts/setup_sglang_overlay.sh on PYTHONPATH.
#
#   bash scripts/test.sh [pytest args...]     e.g. bash scripts/test.sh -m "not slow"
# Test paths among the arguments select the process(es) they belong to.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$ROOT/scripts/setup.sh"
bash "$ROOT/scripts/setup_sglang_overlay.sh"
cd "$ROOT"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export RAY_USAGE_STATS_ENABLED=0
OVERLAY="${SOFT_SPATIAL_SGLANG_OVERLAY:-$ROOT/.venv/sglang-cpu-overlay}"

opts=() main_paths=() sglang_paths=()
for arg in "$@"; do
  path="${arg%%::*}"
  if [[ "$arg" != -* && -e "$path" ]]; then
    case "$(realpath "$path")/" in
      "$ROOT/tests/sglang_real/"*) sglang_paths+=("$arg") ;;
      *) main_paths+=("$arg") ;;
    esac
  else
    opts+=("$arg")
  fi
done
if (( ${#main_paths[@]} + ${#sglang_paths[@]} == 0 )); then
  main_paths=(tests) sglang_paths=(tests/sglang_real)
fi

rc=0
if (( ${#main_paths[@]} )); then
  "$ROOT/.venv/bin/python" -m pytest "${main_paths[@]}" ${opts[@]+"${opts[@]}"} || rc=$?
fi
if (( ${#sglang_paths[@]} )); then
  echo "== SGLang 0.5.12 real-module tests (tests/sglang_real, overlay $OVERLAY) =="
  PYTHONPATH="$OVERLAY:$ROOT/tests/sglang_stubs${PYTHONPATH:+:$PYTHONPATH}" \
    "$ROOT/.venv/bin/python" -m pytest "${sglang_paths[@]}" ${opts[@]+"${opts[@]}"} || rc2=$?
  [[ "${rc2:-0}" != 5 ]] || rc2=0  # 5: the options deselected every SGLang test
  rc=$(( rc ? rc : ${rc2:-0} ))
fi
exit "$rc"
