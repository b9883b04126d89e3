"""A wheel into a site (scripts/gpu/gpukit/wheels.py), on small fake wheels: the trimming rules,
``*.data`` folders laid out as ``pip install --target`` does, the ``#include`` closure that keeps
flashinfer's JIT sources, and flashinfer's sources refused when its JIT modules no longer name
them. No network."""
import os

import pytest
from kit_helpers import files_in, make_wheel

from gpukit import recipe, wheels


def test_sglang_kernel_trim_keeps_python_sm90_and_spatial_ops(tmp_path):
    so = b"\x7fELF" + os.urandom(64)
    wheel = make_wheel(tmp_path, "sglang_kernel", {
        "sgl_kernel/__init__.py": b"", "sgl_kernel/elementwise.py": b"", "sgl_kernel/sub/x.py": b"",
        "sgl_kernel/sm90/common_ops.abi3.so": so, "sgl_kernel/sm100/common_ops.abi3.so": so,
        "sgl_kernel/spatial_ops.abi3.so": so, "sgl_kernel/flash_ops.abi3.so": so,
        "sgl_kernel/flashmla_ops.abi3.so": so, "_mscclpp.cpython-310-x86_64-linux-gnu.so": so,
        "lib/libmscclpp_static.a": so, "include/mscclpp/core.hpp": b""},
        exe={"sgl_kernel/sm90/common_ops.abi3.so"})
    site = tmp_path / "site"
    stats = wheels.unpack_wheel(wheel, site, recipe.TRIM["sglang-kernel"])
    assert files_in(site) == {"sgl_kernel/__init__.py", "sgl_kernel/elementwise.py",
                           "sgl_kernel/sub/x.py", "sgl_kernel/sm90/common_ops.abi3.so",
                           "sgl_kernel/spatial_ops.abi3.so", "sglang_kernel-1.0.dist-info/METADATA",
                           "sglang_kernel-1.0.dist-info/WHEEL"}
    assert stats["dropped_files"] == 6 and stats["dropped_bytes"] == 5 * len(so)
    assert os.access(site / "sgl_kernel/sm90/common_ops.abi3.so", os.X_OK)
    assert not os.access(site / "sgl_kernel/spatial_ops.abi3.so", os.X_OK)
    assert (site / "sgl_kernel/sm90/common_ops.abi3.so").read_bytes() == so


def test_wheel_data_folders_unpack_like_pip_target(tmp_path):
    wheel = make_wheel(tmp_path, "probe", {"probe/__init__.py": b"A = 1\n",
                                       "probe-1.0.data/purelib/probe_extra.py": b"B = 2\n",
                                       "probe-1.0.data/platlib/probe_native.py": b"C = 3\n",
                                       "probe-1.0.data/scripts/probe-cli": b"#!/bin/sh\n",
                                       "probe-1.0.data/headers/probe.h": b""})
    wheels.unpack_wheel(wheel, tmp_path / "site")
    assert files_in(tmp_path / "site") == {"probe/__init__.py", "probe_extra.py", "probe_native.py",
                                        "probe-1.0.dist-info/METADATA", "probe-1.0.dist-info/WHEEL"}


def test_include_closure_follows_quote_and_angle_rules():
    files = {"src/a.cu": b'#include "b.h"\n#include <c.h>\n  #  include <cuda_runtime.h>\n',
             "src/b.h": b"#if 0\n#include <d.h>\n#endif\n",  # under #if: still followed
             "inc/b.h": b"// shadowed: a quoted include looks beside its file first\n",
             "inc/c.h": b'#include "b.h"\n',  # no inc/../b.h beside it: found in inc/ itself
             "inc/d.h": b"", "src/c.h": b"// never reached: <c.h> does not look beside a.cu\n"}
    seen, outside = wheels.include_closure(["src/a.cu"], ["inc"], files.get)
    assert seen == {"src/a.cu", "src/b.h", "inc/c.h", "inc/b.h", "inc/d.h"}
    assert outside == {"cuda_runtime.h"}
    with pytest.raises(FileNotFoundError, match="src/missing.cu"):
        wheels.include_closure(["src/missing.cu"], [], files.get)


def _flashinfer_wheel(tmp_path, norm_py=b'sources = ["norm.cu", "flashinfer_norm_binding.cu"]'):
    d = "flashinfer/data/"
    return make_wheel(tmp_path, "flashinfer_python", {
        "flashinfer/__init__.py": b"", "flashinfer/jit/norm.py": norm_py,
        d + "csrc/norm.cu": b"#include <flashinfer/norm.cuh>\n#include \"tvm_ffi_utils.h\"\n",
        d + "csrc/flashinfer_norm_binding.cu": b'#include "tvm_ffi_utils.h"\n',
        d + "csrc/tvm_ffi_utils.h": b"#include <tvm/ffi/function.h>\n",
        d + "csrc/sampling.cu": b"#include <flashinfer/sampling.cuh>\n",
        d + "include/flashinfer/norm.cuh": b'#include "utils.cuh"\n#include <cub/cub.cuh>\n',
        d + "include/flashinfer/utils.cuh": b"",
        d + "include/flashinfer/sampling.cuh": b"#include <cutlass/cutlass.h>\n",
        d + "cccl/cub/cub/cub.cuh": b"#include <cub/block.cuh>\n",
        d + "cccl/cub/cub/block.cuh": b"",
        d + "cccl/cub/cub/computed.cuh": b"#include CUB_HEADER(x)\n",  # no scan can follow it
        d + "cccl/thrust/thrust/sort.h": b"",
        d + "cutlass/include/cutlass/cutlass.h": b"",
        d + "spdlog/include/spdlog/spdlog.h": b""})


NORM_ONLY = {"jit/norm.py": ["csrc/norm.cu", "csrc/flashinfer_norm_binding.cu"]}


def test_flashinfer_keeps_only_what_the_rmsnorm_build_reads(tmp_path, monkeypatch):
    monkeypatch.setattr(wheels, "FLASHINFER_JIT_SOURCES", NORM_ONLY)
    site = tmp_path / "site"
    wheels.unpack_wheel(_flashinfer_wheel(tmp_path), site, recipe.TRIM["flashinfer-python"])
    d = "flashinfer/data/"
    assert files_in(site) == {
        "flashinfer/__init__.py", "flashinfer/jit/norm.py",
        "flashinfer_python-1.0.dist-info/METADATA", "flashinfer_python-1.0.dist-info/WHEEL",
        d + "csrc/norm.cu", d + "csrc/flashinfer_norm_binding.cu", d + "csrc/tvm_ffi_utils.h",
        d + "include/flashinfer/norm.cuh", d + "include/flashinfer/utils.cuh",
        # a vendored include root the closure reaches travels whole (computed includes)
        d + "cccl/cub/cub/cub.cuh", d + "cccl/cub/cub/block.cuh", d + "cccl/cub/cub/computed.cuh"}


def test_flashinfer_refuses_a_jit_module_that_no_longer_names_its_sources(tmp_path, monkeypatch):
    monkeypatch.setattr(wheels, "FLASHINFER_JIT_SOURCES", NORM_ONLY)
    wheel = _flashinfer_wheel(tmp_path, norm_py=b'sources = ["rmsnorm.cu"]')
    with pytest.raises(SystemExit, match="no longer builds csrc/norm.cu"):
        wheels.unpack_wheel(wheel, tmp_path / "site", recipe.TRIM["flashinfer-python"])


def test_flashinfer_attention_sources_travel_with_what_they_reach(tmp_path, monkeypatch):
    """A second JIT module (attention: a .cu and a Jinja template, as flashinfer's batch decode
    module copies and renders them) keeps its sources, its own headers and, whole, the vendored
    root they reach (CUTLASS here), beside the RMSNorm closure."""
    monkeypatch.setattr(wheels, "FLASHINFER_JIT_SOURCES", dict(NORM_ONLY, **{
        "jit/attention/modules.py": ["csrc/batch_decode.cu",
                                     "csrc/batch_decode_kernel_inst.jinja"]}))
    d = "flashinfer/data/"
    wheel = make_wheel(tmp_path, "flashinfer_python", {
        "flashinfer/__init__.py": b"", "flashinfer/jit/norm.py": b'["norm.cu", '
                                                                  b'"flashinfer_norm_binding.cu"]',
        "flashinfer/jit/attention/modules.py": b'for f in ["batch_decode.cu"]: ...\n'
                                               b'open("batch_decode_kernel_inst.jinja")',
        d + "csrc/norm.cu": b"", d + "csrc/flashinfer_norm_binding.cu": b"",
        d + "csrc/batch_decode.cu": b'#include <flashinfer/attention/decode.cuh>\n',
        d + "csrc/batch_decode_kernel_inst.jinja": b'#include "batch_decode_config.inc"\n'
                                                   b"#include <flashinfer/attention/state.cuh>\n",
        d + "csrc/sampling.cu": b"",
        d + "include/flashinfer/attention/decode.cuh": b"#include <cutlass/cutlass.h>\n",
        d + "include/flashinfer/attention/state.cuh": b"",
        d + "include/flashinfer/attention/prefill.cuh": b"",
        d + "cutlass/include/cutlass/cutlass.h": b"",
        d + "cutlass/include/cute/tensor.hpp": b"",
        d + "spdlog/include/spdlog/spdlog.h": b""})
    site = tmp_path / "site"
    wheels.unpack_wheel(wheel, site, recipe.TRIM["flashinfer-python"])
    kept = {p for p in files_in(site) if p.startswith(d)}
    assert kept == {d + "csrc/norm.cu", d + "csrc/flashinfer_norm_binding.cu",
                    d + "csrc/batch_decode.cu", d + "csrc/batch_decode_kernel_inst.jinja",
                    d + "include/flashinfer/attention/decode.cuh",
                    d + "include/flashinfer/attention/state.cuh",
                    d + "cutlass/include/cutlass/cutlass.h", d + "cutlass/include/cute/tensor.hpp"}


def test_the_kit_builds_flashinfers_attention_for_sglangs_backend():
    """The modules SGLang's flashinfer attention backend builds on Hopper: decode, prefill (FA2
    and sm90) and cascade's merge_state, by the file names flashinfer 0.6.11 copies."""
    src = wheels.FLASHINFER_JIT_SOURCES
    assert {"csrc/batch_decode.cu", "csrc/batch_prefill.cu", "csrc/batch_prefill_sm90.cu"} \
        <= set(src["jit/attention/modules.py"])
    assert src["jit/cascade.py"] == ["csrc/cascade.cu", "csrc/flashinfer_cascade_binding.cu"]
    assert not any(f.endswith("_kernel.cu") for f in src["jit/attention/modules.py"])  # generated


def test_sglang_pack_leaves_out_the_diffusion_runtime_only():
    rule = recipe.TRIM["sglang"]
    assert not wheels.kept("sglang/multimodal_gen/runtime/entrypoint.py", rule)
    for member in ("sglang/srt/entrypoints/engine.py", "sglang/cli/serve.py", "sglang/__init__.py",
                   "sglang-0.5.12.dist-info/RECORD", "sglang/test/test_utils.py"):
        assert wheels.kept(member, rule), member
