#!/usr/bin/env bash
# GPU environment for soft_spatial with the SGLang soft-rollout backend (rollout=sglang).
#
#   bash scripts/setup_gpu.sh           # creates ./.venv-gpu (SOFT_SPATIAL_GPU_VENV to change)
#   bash scripts/setup_gpu.sh --check   # resolution only (pip install --dry-run), no install
#
# Versions: torch 2.11.0 (+ torchvision 0.26.0, torchaudio 2.11.0), verl 0.9.1, sglang 0.5.12,
# flash-attn 2.8.3, transformers 5.9.0.
#
# Why sglang is installed with --no-deps: sglang 0.5.12 pins transformers==5.6.0, and verl 0.9.1
# requires transformers>=5.5.3,<5.11,!=5.6.0 (verl's own [sglang] extra pins 5.9.0), so no
# resolver can satisfy both. We install sglang's other requirements (SGLANG_DEPS below, copied
# from its wheel's METADATA for linux x86_64, transformers removed) together with verl and
# transformers 5.9.0 in one resolution, then sglang itself without dependencies. The plugin only
# touches the sampler, hook registry, batch structures and Qwen3-VL model of sglang, which import
# and run with transformers 5.9/5.10 (docs/sglang.md, "Running the real engine on a CPU").
# flash-attn 2.8.3 ships as a source distribution that builds against the installed torch and
# CUDA: it is installed last with --no-build-isolation (needs nvcc), and --check only verifies
# that the version exists on the index.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${SOFT_SPATIAL_GPU_VENV:-$ROOT/.venv-gpu}"
PYTHON="${PYTHON:-python3.11}"
CHECK=0
[[ "${1:-}" == "--check" ]] && CHECK=1

TORCH=(torch==2.11.0 torchvision==0.26.0 torchaudio==2.11.0)
CORE=(verl==0.9.1 transformers==5.9.0)
SGLANG=sglang==0.5.12
FLASH_ATTN=flash-attn==2.8.3
SGLANG_DEPS=(
  IPython aiohttp apache-tvm-ffi==0.1.9 "anthropic>=0.20.0" blobfile==3.0.0 build
  compressed-tensors "cuda-python>=13.0" datasets einops fastapi flashinfer_python==0.6.11.post1
  flashinfer_cubin==0.6.11.post1 gguf interegular "llguidance<0.8.0,>=0.7.11" modelscope msgspec
  ninja easydict numpy nvidia-cutlass-dsl==4.5.0 nvidia-ml-py openai-harmony==0.0.4 openai==2.6.1
  orjson outlines==0.1.11 packaging partial_json_parser pillow "prometheus-client>=0.20.0" psutil
  py-spy pybase64 pydantic python-multipart "pyzmq>=25.1.2" "quack-kernels>=0.4.1" requests scipy
  sentencepiece setproctitle "flash-attn-4>=4.0.0b9" sgl-deep-gemm==0.1.0
  sglang-kernel==0.4.2.post2 soundfile==0.13.1 tiktoken tilelang==0.1.8 timm==1.0.16
  tokenspeed_mla==0.1.1 "torch_memory_saver>=0.0.9.post1" torchao==0.17.0 torchcodec==0.11.1
  tqdm "mistral_common>=1.11.0" uvicorn uvloop watchfiles xgrammar==0.2.0
  "smg-grpc-servicer>=0.5.0" kernels torchdata
)

if [[ "$CHECK" == 1 ]]; then
  TMP="$(mktemp -d)"
  trap 'rm -rf "$TMP"' EXIT
  "$PYTHON" -m venv "$TMP/venv"
  PIP=("$TMP/venv/bin/python" -m pip --disable-pip-version-check)
  "${PIP[@]}" install -q --upgrade "pip>=24"
  echo "setup_gpu.sh --check: resolving torch + verl + transformers + sglang's other deps"
  "${PIP[@]}" install --dry-run --ignore-installed --quiet --report "$TMP/report.json" \
    "${TORCH[@]}" "${CORE[@]}" "${SGLANG_DEPS[@]}" -e "${ROOT}[test]"
  "$TMP/venv/bin/python" - "$TMP/report.json" <<'PY'
import json, sys
got = {i["metadata"]["name"].lower(): i["metadata"]["version"]
       for i in json.load(open(sys.argv[1]))["install"]}
want = {"torch": "2.11.0", "verl": "0.9.1", "transformers": "5.9.0", "torchvision": "0.26.0"}
bad = {k: got.get(k) for k, v in want.items() if got.get(k) != v}
if bad:
    sys.exit(f"setup_gpu.sh --check: unexpected versions {bad}")
print(f"setup_gpu.sh --check: {len(got)} packages resolve; " +
      ", ".join(f"{k} {got[k]}" for k in want))
PY
  echo "setup_gpu.sh --check: $SGLANG without dependencies"
  "${PIP[@]}" install --dry-run --ignore-installed --no-deps --quiet "$SGLANG"
  "${PIP[@]}" index versions flash-attn 2>/dev/null | grep -q "2\.8\.3" \
    || { echo "setup_gpu.sh --check: $FLASH_ATTN not on the index" >&2; exit 1; }
  echo "setup_gpu.sh --check: ok ($FLASH_ATTN available as source)"
  exit 0
fi

echo "setup_gpu.sh: creating $VENV"
[[ -x "$VENV/bin/python" ]] || "$PYTHON" -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check)
"${PIP[@]}" install -q --upgrade "pip>=24" setuptools wheel
"${PIP[@]}" install --progress-bar off "${TORCH[@]}" "${CORE[@]}" "${SGLANG_DEPS[@]}" -e "${ROOT}[test]"
"${PIP[@]}" install --progress-bar off --no-deps "$SGLANG"
"${PIP[@]}" install --progress-bar off --no-build-isolation "$FLASH_ATTN"
"$VENV/bin/python" - <<'PY'
import sglang, torch, transformers, verl
import soft_spatial.engines.sglang.hooks  # noqa: F401  (version check of the plugin's hooks)
print(f"setup_gpu.sh: torch {torch.__version__} (cuda {torch.version.cuda}), verl "
      f"{verl.__version__}, sglang {sglang.__version__}, transformers {transformers.__version__}")
PY
echo "setup_gpu.sh: done. Activate with: source $VENV/bin/activate"
