#!/usr/bin/env bash
# SGLang 0.5.12's real modules on the CPU, for the tests in tests/sglang_real/ (run by
# scripts/test.sh after the main suite).
#
#   bash scripts/setup_sglang_overlay.sh           # idempotent; FORCE=1 reinstalls
#
# sglang cannot be installed into .venv the normal way: its requirements pin torch 2.11.0 and
# transformers 5.6.0 (which verl 0.9.1 excludes) and pull CUDA-only packages (sgl-kernel,
# flashinfer). Here sglang and the pure-Python packages its modules import go, with --no-deps,
# into a separate folder ($OVERLAY) that only the SGLang test process puts on PYTHONPATH, in
# front of .venv (torch 2.14.1, triton, torchvision, transformers 5.10.4, verl 0.9.1). The only
# missing import is the CUDA kernel package sgl_kernel, for which tests/sglang_stubs/ has an
# import-only stand-in. .venv itself is never changed, so the main suite keeps running without
# sglang. See docs/sglang.md ("Running the real engine on a CPU") for what runs on a CPU and what
# does not.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="$ROOT/.venv/bin/python"
OVERLAY="${SOFT_SPATIAL_SGLANG_OVERLAY:-$ROOT/.venv/sglang-cpu-overlay}"
[[ -x "$PY" ]] || { echo "setup_sglang_overlay.sh: no $PY; run bash scripts/setup.sh first" >&2; exit 1; }

# Exact versions (all pure Python or self-contained wheels); none is installed in .venv.
PACKAGES=(
  sglang==0.5.12
  # what sglang's modules import on the sampler / hook / scheduler / engine / verl-server paths
  pybase64==1.5.1 partial-json-parser==0.2.1.1.post7 sentencepiece==0.2.3 einops==0.8.2
  compressed-tensors==0.20.0 loguru==0.7.3 gguf==0.19.0 setproctitle==1.3.8 openai==2.6.1
  uvloop==0.23.0 soundfile==0.14.0 python-multipart==0.0.34
  # IPython (sglang.utils imports IPython.display) and its own imports
  ipython==9.18.1 traitlets==5.16.1 decorator==5.3.1 jedi==0.20.1 parso==0.8.7
  matplotlib-inline==0.2.2 pexpect==4.9.0 ptyprocess==0.7.0 prompt-toolkit==3.0.53
  wcwidth==0.9.4 stack-data==0.6.3 executing==2.3.0 asttokens==3.0.2 pure-eval==0.2.4
  ipython-pygments-lexers==1.1.1
)

STAMP="$( (printf '%s\n' "${PACKAGES[@]}"; cat "$ROOT/.venv/.soft_spatial_setup" 2>/dev/null) \
          | sha256sum | cut -d' ' -f1)"
if [[ -z "${FORCE:-}" && -f "$OVERLAY/.soft_spatial_setup" \
      && "$(cat "$OVERLAY/.soft_spatial_setup")" == "$STAMP" ]]; then
  echo "setup_sglang_overlay.sh: $OVERLAY is up to date"
  exit 0
fi

echo "setup_sglang_overlay.sh: installing sglang 0.5.12 (--no-deps) into $OVERLAY"
rm -rf "$OVERLAY"
"$PY" -m pip --disable-pip-version-check install -q --progress-bar off --no-deps \
  --target "$OVERLAY" "${PACKAGES[@]}"
for pkg in torch triton torchvision transformers numpy; do  # must come from .venv
  [[ ! -e "$OVERLAY/$pkg" ]] || { echo "setup_sglang_overlay.sh: $pkg landed in $OVERLAY" >&2; exit 1; }
done
cd "$ROOT"
PYTHONPATH="$OVERLAY:$ROOT/tests/sglang_stubs" SGLANG_USE_CPU_ENGINE=1 "$PY" - <<'PY' 2>&1 \
  | grep -v -i warn
import sglang, torch
import sglang.srt.managers.tp_worker, sglang.srt.models.qwen3_vl  # noqa: E401,F401
import soft_spatial.engines.sglang.hooks  # noqa: F401
import soft_spatial.rollout.sglang_server  # noqa: F401  (verl's SGLang server classes)
print(f"setup_sglang_overlay.sh: sglang {sglang.__version__} imports on torch {torch.__version__}")
PY
echo "$STAMP" > "$OVERLAY/.soft_spatial_setup"
echo "setup_sglang_overlay.sh: done ($(du -sh "$OVERLAY" | cut -f1))"
