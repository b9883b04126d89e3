#!/usr/bin/env bash
# One-command CPU environment for soft_spatial.
#
#   bash scripts/setup.sh          # creates ./.venv (idempotent; a second run is a no-op)
#   FORCE=1 bash scripts/setup.sh  # reinstall even if nothing changed
#
# Installs torch 2.14.1 + torchvision 0.29.1 (the build that runs on CPU and also ships CUDA
# libraries, so the same environment runs on a GPU machine), verl[verl-core]==0.9.1, transformers
# inside verl's pin, this package in editable mode and the test tools. Everything comes from the
# package index pip is configured with; nothing is downloaded at test time.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${SOFT_SPATIAL_VENV:-$ROOT/.venv}"
PYTHON="${PYTHON:-}"
TORCH_SPEC="${TORCH_SPEC:-torch==2.14.1 torchvision==0.29.1}"

if [[ -z "$PYTHON" ]]; then
  for cand in python3.11 python3.12 python3.10 python3; do
    if command -v "$cand" >/dev/null 2>&1; then PYTHON="$cand"; break; fi
  done
fi
[[ -n "$PYTHON" ]] || { echo "setup.sh: no python3 found (need 3.10-3.12)" >&2; exit 1; }

# The stamp captures every input of the install: re-running with the same inputs does nothing.
stamp_inputs() {
  cat "$ROOT/pyproject.toml" "$ROOT/scripts/setup.sh" "$ROOT/scripts/constraints-cpu.txt"
  echo "$TORCH_SPEC" "$("$PYTHON" -c 'import sys; print(sys.version)')"
  echo "bytecode written by imports: ${PYTHONDONTWRITEBYTECODE:+no}"
}
STAMP="$(stamp_inputs | sha256sum | cut -d' ' -f1)"
if [[ -z "${FORCE:-}" && -f "$VENV/.soft_spatial_setup" && "$(cat "$VENV/.soft_spatial_setup")" == "$STAMP" ]]; then
  echo "setup.sh: $VENV is up to date"
  exit 0
fi

echo "setup.sh: creating $VENV with $("$PYTHON" --version)"
[[ -x "$VENV/bin/python" ]] || "$PYTHON" -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check)
"${PIP[@]}" install -q --upgrade "pip>=24" setuptools wheel
# shellcheck disable=SC2086
"${PIP[@]}" install -q --no-compile --progress-bar off -c "$ROOT/scripts/constraints-cpu.txt" \
  $TORCH_SPEC -e "${ROOT}[test]"
# Bytecode: where Python may write it (PYTHONDONTWRITEBYTECODE unset), each module is compiled on
# its first import, so only what runs is compiled (a fifth of the 20,000 files: the whole
# compilation took 39 s of a fresh 2-core machine's setup, 2026-12-08); where it may not, every
# file is compiled here on every core (otherwise each process would compile its imports again;
# 109 s for the setup against 146 s with pip's own one-file-at-a-time step, 2026-11-28). Which of
# the two is in the stamp: a change of the setting sets up again. A file written for a newer
# Python (torch/testing/_internal/py312_intrinsics.py) fails here as it does under pip, which
# ignores it too.
if [[ -n "${PYTHONDONTWRITEBYTECODE:-}" ]]; then
  "$VENV/bin/python" -m compileall -qq -j 0 \
    "$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" || true
fi
"$VENV/bin/python" - <<'PY'
import torch, torchvision, transformers, verl  # noqa: F401
import soft_spatial.softthink  # noqa: F401
print(f"setup.sh: torch {torch.__version__}, torchvision {torchvision.__version__}, "
      f"transformers {transformers.__version__}, verl {verl.__version__}")
PY
echo "$STAMP" > "$VENV/.soft_spatial_setup"
echo "setup.sh: done. Activate with: source $VENV/bin/activate"
