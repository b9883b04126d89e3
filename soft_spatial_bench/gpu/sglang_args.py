"""The SGLang server arguments and environment of every engine the GPU kit starts, in one place.

The kit carries SGLang 0.5.12 trimmed to what one H100/H200 needs (``scripts/gpu/kit.py``): no FA3
(``flash_ops``), no flashinfer JIT sources beyond RMSNorm's, no xgrammar. SGLang and verl pick
backends the kit does not carry whenever an argument is left unset: the text attention (FA3 on
Hopper; verl 0.9.1 sets flashinfer for SGLang >= 0.5.12), the vision attention (FA3 on Hopper),
the grammar backend (xgrammar) and the stock sampler (flashinfer's). So every CUDA engine names
all four (:data:`BACKENDS`), and :func:`unset_backends` says which a composed set leaves to a
default (a CPU test runs it on every set the kit and ``configs/cluster/gpu1.yaml`` compose).

fp32 parity engines add TF32 off everywhere: cuBLAS/cuDNN (``NVIDIA_TF32_OVERRIDE=0``), Triton's
``tl.dot`` (``TRITON_F32_DEFAULT=ieee``), and attention in ``torch_native`` (Triton's attention
kernels compute their dots in TF32). Native ops (:data:`soft_spatial.compat.sglang.NATIVE_OPS_ENV`)
replace SGLang's fused kernels (RMSNorm's dispatches on fp16/bf16 only) by their PyTorch forms.
"""
from __future__ import annotations

from typing import Any

from soft_spatial.compat.sglang import NATIVE_OPS_ENV

__all__ = ["BACKENDS", "CARRIED", "FUSED_ATTENTION", "FUSED_ATTENTION_WHY", "GRAPH_BATCH_SIZES",
           "CPU_ARGS", "cuda_args", "cpu_args", "engine_env", "unset_backends", "NATIVE_OPS_ENV"]

# every backend SGLang or verl would otherwise choose, with the values the kit carries
CARRIED = {
    "attention_backend": ("triton", "torch_native", "flashinfer"),
    "mm_attention_backend": ("sdpa",),
    "grammar_backend": ("none",),
    "sampling_backend": ("pytorch", "soft_gumbel"),
}
BACKENDS = tuple(CARRIED)
# The attention of the F jobs with SGLang's fused kernels. On Hopper SGLang picks FA3 and verl
# 0.9.1 flashinfer; neither travels in a call (docs/gpu.md, "Attention on Hopper"), so the best
# carried backend is Triton's, for stock and plugin alike.
FUSED_ATTENTION = "triton"
FUSED_ATTENTION_WHY = (
    "FA3 is sgl-kernel's flash_ops.abi3.so, 1.07 GB (a call carries 64 MiB, the project "
    "included); flashinfer's attention is built by its JIT with nvcc on first use (its sources "
    "travel, +1.1 MiB of xz; the build's time on the device is unmeasured: F/fi-* measure it) "
    "and its AOT cache package is not on PyPI")
# CUDA graphs captured for these decode batch sizes: the 1, 8 and 64 rows the kit measures and
# the batches on the way (a smaller batch pads to the next size); fewer sizes, a shorter start
GRAPH_BATCH_SIZES = (1, 2, 4, 8, 16, 32, 64)
# SGLang's engine on this CPU, as tests/sglang_real runs it (docs/sglang.md); an idle scheduler
# waits on its sockets (SGLang's default spins a core, which a dry run's own work needs), as
# configs/cluster/cpu.yaml's does
CPU_ARGS = dict(device="cpu", attention_backend="torch_native", grammar_backend="none",
                max_total_tokens=8192, sleep_on_idle=True)


def cuda_args(dtype: str, *, graphs: bool, plugin: bool, overlap: bool = False,
              parity: bool = False, attention: str | None = None, dummy: bool = False,
              mem_fraction: float = 0.5) -> dict[str, Any]:
    """Server arguments of one CUDA engine of the kit.

    dtype: "bfloat16" (throughput) or "float32" (parity).
    graphs: CUDA graphs on (captured for :data:`GRAPH_BATCH_SIZES`) or off.
    plugin: the soft plugin samples (``soft_gumbel``, set by ``required_server_args``); a stock
        engine samples with PyTorch (flashinfer's sampler is not carried).
    overlap: SGLang's overlap scheduling (the plugin's default is off).
    parity: an fp32 comparison (its environment: :func:`engine_env`).
    attention: the text attention backend; default ``torch_native`` for parity with graphs off
        (no TF32 dots; SGLang turns graphs off for it), else ``triton`` (with parity: Triton's
        dots in IEEE fp32 through ``TRITON_F32_DEFAULT=ieee``, and graphs allowed).
    dummy: SGLang draws random weights itself (``load_format=dummy``): a shape without files.
    """
    if parity and dtype != "float32":
        raise ValueError(f"cuda_args: parity engines run in float32, got {dtype!r}")
    if attention is None:
        attention = "torch_native" if parity and not graphs else "triton"
    if attention == "torch_native" and graphs:
        raise ValueError("cuda_args: SGLang turns CUDA graphs off with torch_native attention; "
                         "use triton for graphs on")
    args = dict(dtype=dtype, skip_server_warmup=True, mem_fraction_static=mem_fraction,
                log_level="error", attention_backend=attention,
                mm_attention_backend="sdpa", grammar_backend="none",
                disable_cuda_graph=not graphs, disable_overlap_schedule=not overlap)
    if graphs:
        args["cuda_graph_bs"] = list(GRAPH_BATCH_SIZES)
    if not plugin:
        args["sampling_backend"] = "pytorch"
    if dummy:
        args["load_format"] = "dummy"
    return args


def cpu_args(**extra) -> dict[str, Any]:
    """The CPU dry run's server arguments: fp32 (SGLang's "auto" would load an fp32 checkpoint in
    half precision), no CUDA graphs on a CPU."""
    args = dict(CPU_ARGS, dtype="float32", skip_server_warmup=True, mem_fraction_static=0.5,
                log_level="error")
    args.update(extra)
    return args


def engine_env(*, parity: bool, native_ops: bool, flashinfer: bool = False) -> dict[str, str]:
    """Environment for an engine's processes (SGLang's schedulers inherit it): native ops on or
    off, flashinfer off unless the engine's attention is flashinfer's (the kit carries the JIT
    sources of its RMSNorm, attention and cascade modules, built on first use), and for fp32
    parity TF32 off in cuBLAS, cuDNN and Triton's ``tl.dot``."""
    env = {NATIVE_OPS_ENV: "1" if native_ops else "0",
           "SGLANG_IS_FLASHINFER_AVAILABLE": "true" if flashinfer else "false"}
    if parity:
        env.update(NVIDIA_TF32_OVERRIDE="0", TRITON_F32_DEFAULT="ieee")
    return env


def unset_backends(args: dict[str, Any], *, plugin: bool) -> list[str]:
    """The backends a composed CUDA argument set leaves to SGLang's or verl's default, or sets to
    a value the kit does not carry, as ``"name=value"`` (empty: every backend is named and
    carried). ``plugin``: the soft plugin sets ``sampling_backend`` itself
    (``required_server_args``), so a plugin set may leave it unset."""
    out = []
    for key, values in CARRIED.items():
        value = args.get(key)
        if value is None and key == "sampling_backend" and plugin:
            continue
        if value not in values:
            out.append(f"{key}={value!r}")
    return out
