"""The GPU kit's CPU-side parts: trimming wheels into a site (on small fake wheels), the #include
closure that keeps flashinfer's RMSNorm build sources, reproducible xz packs, the per-call size
budget, splitting and reassembly across device calls, checksum refusal, idempotent install. No network.
(check.py's dry runs: tests/bench/gpu/test_headline.py and the jobs' own tests.)"""
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "scripts" / "gpu"))
import kit  # noqa: E402

MiB = 1 << 20


def _wheel(dir_: Path, name: str, files: dict, version: str = "1.0", exe=()) -> Path:
    """A wheel ``name`` holding ``files`` ({member: bytes}) plus its dist-info; members in ``exe``
    carry the executable bit."""
    info = f"{name}-{version}.dist-info"
    files = {**files, f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\n"
                                            f"Version: {version}\n".encode(),
             f"{info}/WHEEL": b"Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    path = dir_ / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for member, data in files.items():
            zi = zipfile.ZipInfo(member)
            zi.external_attr = (0o100755 if member in exe else 0o100644) << 16
            z.writestr(zi, data)
    return path


def _tree(root: Path) -> set:
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}


def test_sglang_kernel_trim_keeps_python_sm90_and_spatial_ops(tmp_path):
    so = b"\x7fELF" + os.urandom(64)
    wheel = _wheel(tmp_path, "sglang_kernel", {
        "sgl_kernel/__init__.py": b"", "sgl_kernel/elementwise.py": b"", "sgl_kernel/sub/x.py": b"",
        "sgl_kernel/sm90/common_ops.abi3.so": so, "sgl_kernel/sm100/common_ops.abi3.so": so,
        "sgl_kernel/spatial_ops.abi3.so": so, "sgl_kernel/flash_ops.abi3.so": so,
        "sgl_kernel/flashmla_ops.abi3.so": so, "_mscclpp.cpython-310-x86_64-linux-gnu.so": so,
        "lib/libmscclpp_static.a": so, "include/mscclpp/core.hpp": b""},
        exe={"sgl_kernel/sm90/common_ops.abi3.so"})
    site = tmp_path / "site"
    stats = kit.unpack_wheel(wheel, site, kit.TRIM["sglang-kernel"])
    assert _tree(site) == {"sgl_kernel/__init__.py", "sgl_kernel/elementwise.py",
                           "sgl_kernel/sub/x.py", "sgl_kernel/sm90/common_ops.abi3.so",
                           "sgl_kernel/spatial_ops.abi3.so", "sglang_kernel-1.0.dist-info/METADATA",
                           "sglang_kernel-1.0.dist-info/WHEEL"}
    assert stats["dropped_files"] == 6 and stats["dropped_bytes"] == 5 * len(so)
    assert os.access(site / "sgl_kernel/sm90/common_ops.abi3.so", os.X_OK)
    assert not os.access(site / "sgl_kernel/spatial_ops.abi3.so", os.X_OK)
    assert (site / "sgl_kernel/sm90/common_ops.abi3.so").read_bytes() == so


def test_wheel_data_folders_unpack_like_pip_target(tmp_path):
    wheel = _wheel(tmp_path, "probe", {"probe/__init__.py": b"A = 1\n",
                                       "probe-1.0.data/purelib/probe_extra.py": b"B = 2\n",
                                       "probe-1.0.data/platlib/probe_native.py": b"C = 3\n",
                                       "probe-1.0.data/scripts/probe-cli": b"#!/bin/sh\n",
                                       "probe-1.0.data/headers/probe.h": b""})
    kit.unpack_wheel(wheel, tmp_path / "site")
    assert _tree(tmp_path / "site") == {"probe/__init__.py", "probe_extra.py", "probe_native.py",
                                        "probe-1.0.dist-info/METADATA", "probe-1.0.dist-info/WHEEL"}


def test_include_closure_follows_quote_and_angle_rules():
    files = {"src/a.cu": b'#include "b.h"\n#include <c.h>\n  #  include <cuda_runtime.h>\n',
             "src/b.h": b"#if 0\n#include <d.h>\n#endif\n",  # under #if: still followed
             "inc/b.h": b"// shadowed: a quoted include looks beside its file first\n",
             "inc/c.h": b'#include "b.h"\n',  # no inc/../b.h beside it: found in inc/ itself
             "inc/d.h": b"", "src/c.h": b"// never reached: <c.h> does not look beside a.cu\n"}
    seen, outside = kit.include_closure(["src/a.cu"], ["inc"], files.get)
    assert seen == {"src/a.cu", "src/b.h", "inc/c.h", "inc/b.h", "inc/d.h"}
    assert outside == {"cuda_runtime.h"}
    with pytest.raises(FileNotFoundError, match="src/missing.cu"):
        kit.include_closure(["src/missing.cu"], [], files.get)


def _flashinfer_wheel(tmp_path, norm_py=b'sources = ["norm.cu", "flashinfer_norm_binding.cu"]'):
    d = "flashinfer/data/"
    return _wheel(tmp_path, "flashinfer_python", {
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
    monkeypatch.setattr(kit, "FLASHINFER_JIT_SOURCES", NORM_ONLY)
    site = tmp_path / "site"
    kit.unpack_wheel(_flashinfer_wheel(tmp_path), site, kit.TRIM["flashinfer-python"])
    d = "flashinfer/data/"
    assert _tree(site) == {
        "flashinfer/__init__.py", "flashinfer/jit/norm.py",
        "flashinfer_python-1.0.dist-info/METADATA", "flashinfer_python-1.0.dist-info/WHEEL",
        d + "csrc/norm.cu", d + "csrc/flashinfer_norm_binding.cu", d + "csrc/tvm_ffi_utils.h",
        d + "include/flashinfer/norm.cuh", d + "include/flashinfer/utils.cuh",
        # a vendored include root the closure reaches travels whole (computed includes)
        d + "cccl/cub/cub/cub.cuh", d + "cccl/cub/cub/block.cuh", d + "cccl/cub/cub/computed.cuh"}


def test_flashinfer_refuses_a_jit_module_that_no_longer_names_its_sources(tmp_path, monkeypatch):
    monkeypatch.setattr(kit, "FLASHINFER_JIT_SOURCES", NORM_ONLY)
    wheel = _flashinfer_wheel(tmp_path, norm_py=b'sources = ["rmsnorm.cu"]')
    with pytest.raises(SystemExit, match="no longer builds csrc/norm.cu"):
        kit.unpack_wheel(wheel, tmp_path / "site", kit.TRIM["flashinfer-python"])


def test_flashinfer_attention_sources_travel_with_what_they_reach(tmp_path, monkeypatch):
    """A second JIT module (attention: a .cu and a Jinja template, as flashinfer's batch decode
    module copies and renders them) keeps its sources, its own headers and, whole, the vendored
    root they reach (CUTLASS here), beside the RMSNorm closure."""
    monkeypatch.setattr(kit, "FLASHINFER_JIT_SOURCES", dict(NORM_ONLY, **{
        "jit/attention/modules.py": ["csrc/batch_decode.cu",
                                     "csrc/batch_decode_kernel_inst.jinja"]}))
    d = "flashinfer/data/"
    wheel = _wheel(tmp_path, "flashinfer_python", {
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
    kit.unpack_wheel(wheel, site, kit.TRIM["flashinfer-python"])
    kept = {p for p in _tree(site) if p.startswith(d)}
    assert kept == {d + "csrc/norm.cu", d + "csrc/flashinfer_norm_binding.cu",
                    d + "csrc/batch_decode.cu", d + "csrc/batch_decode_kernel_inst.jinja",
                    d + "include/flashinfer/attention/decode.cuh",
                    d + "include/flashinfer/attention/state.cuh",
                    d + "cutlass/include/cutlass/cutlass.h", d + "cutlass/include/cute/tensor.hpp"}


def test_the_kit_builds_flashinfers_attention_for_sglangs_backend():
    """The modules SGLang's flashinfer attention backend builds on Hopper: decode, prefill (FA2
    and sm90) and cascade's merge_state, by the file names flashinfer 0.6.11 copies."""
    src = kit.FLASHINFER_JIT_SOURCES
    assert {"csrc/batch_decode.cu", "csrc/batch_prefill.cu", "csrc/batch_prefill_sm90.cu"} \
        <= set(src["jit/attention/modules.py"])
    assert src["jit/cascade.py"] == ["csrc/cascade.cu", "csrc/flashinfer_cascade_binding.cu"]
    assert not any(f.endswith("_kernel.cu") for f in src["jit/attention/modules.py"])  # generated


def test_pack_is_reproducible_and_keeps_executable_bits(tmp_path):
    wheel = _wheel(tmp_path, "probe", {"probe/__init__.py": b"A = 1\n", "probe/tool": b"#!/bin/sh\n"},
                   exe={"probe/tool"})
    lib = tmp_path / "libx.so.1"
    lib.write_bytes(b"\x7fELF lib")
    a = kit.build_pack("verl", {"probe": wheel}, [lib], tmp_path / "b1", preset=1)
    b = kit.build_pack("verl", {"probe": wheel}, [lib], tmp_path / "b2", preset=1)
    assert kit.sha256(Path(a["path"])) == kit.sha256(Path(b["path"]))
    shutil.copytree(tmp_path / "b1", tmp_path / "moved")  # a copied build folder is reused as is
    moved = tmp_path / "moved" / "verl.tar.xz"
    written = moved.stat().st_mtime_ns
    c = kit.build_pack("verl", {"probe": wheel}, [lib], tmp_path / "moved", preset=1)
    assert c == {**a, "path": str(moved)} and moved.stat().st_mtime_ns == written
    assert a["files"] == 5 and a["dists"] == ["probe==1.0"] and a["stages"] == ["c", "e"]
    store = tmp_path / "store"
    e = {"name": "verl", "file": "verl.tar.xz", "size": Path(a["path"]).stat().st_size,
         "sha256": kit.sha256(Path(a["path"]))}
    (store / "pieces").mkdir(parents=True)
    (store / "pieces" / "verl.tar.xz").write_bytes(Path(a["path"]).read_bytes())
    kit.unpack_pack(store, e)
    assert os.access(store / "verl/site/probe/tool", os.X_OK)
    assert (store / "verl/site/probe/tool").stat().st_mtime == kit.TAR_MTIME
    assert (store / "verl/lib/libx.so.1").read_bytes() == b"\x7fELF lib"
    assert kit.installed(store, e) and not list((store / "pieces").iterdir())


def _x86_calls(n: int = 4000) -> bytes:
    """Machine code as a shared library holds it: ``call rel32`` to a few functions from many
    places; each call site's relative target differs, its absolute target repeats."""
    import random
    rng, targets, code = random.Random(0), [0x1000 * (i + 1) for i in range(8)], bytearray()
    for _ in range(n):
        code += bytes([0x48, 0x89, 0xC7])  # mov rdi, rax
        rel = rng.choice(targets) - (len(code) + 5)
        code += b"\xe8" + (rel & 0xFFFFFFFF).to_bytes(4, "little")
    return bytes(code)


def test_packs_compress_machine_code_through_the_branch_converter(tmp_path):
    """A pack is a plain .tar.xz to any reader, and its x86 branch converter makes machine code
    smaller than LZMA2 alone at the same preset; Python's tarfile (the device's reader) undoes it."""
    import lzma
    import tarfile
    code = _x86_calls()
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "libcode.so").write_bytes(code)
    kit.tar_xz(tmp_path / "src", tmp_path / "p.tar.xz", preset=6)
    with tarfile.open(tmp_path / "p.tar.xz", "r:xz") as tar:
        assert tar.extractfile("libcode.so").read() == code
    plain = len(lzma.compress(code, preset=6 | lzma.PRESET_EXTREME))
    assert len(lzma.compress(code, format=lzma.FORMAT_XZ, filters=kit.xz_filters(6))) < 0.8 * plain


def test_sglang_pack_leaves_out_the_diffusion_runtime_only():
    rule = kit.TRIM["sglang"]
    assert not kit.kept("sglang/multimodal_gen/runtime/entrypoint.py", rule)
    for member in ("sglang/srt/entrypoints/engine.py", "sglang/cli/serve.py", "sglang/__init__.py",
                   "sglang-0.5.12.dist-info/RECORD", "sglang/test/test_utils.py"):
        assert kit.kept(member, rule), member


def test_call_budget_and_packing():
    assert kit.call_budget(2 * MiB) == 64 * MiB - 2 * MiB - kit.MARGIN
    with pytest.raises(SystemExit, match="leaves no room"):
        kit.call_budget(63 * MiB + 1)
    items = [(Path(f"f{i}"), size, prio) for i, (size, prio) in
             enumerate([(60, 1), (50, 0), (30, 0), (40, 1), (20, 2)])]
    calls = kit.pack_calls(items, 100)
    sizes = {p.name: s for p, s, _ in items}
    assert all(sum(sizes[p.name] for p in c) <= 100 for c in calls)
    assert [p.name for p in calls[0]][:2] == ["f1", "f2"]  # the first pack's pieces come first
    assert sorted(p.name for c in calls for p in c) == sorted(sizes)
    with pytest.raises(ValueError, match="exceeds a call's budget"):
        kit.pack_calls([(Path("big"), 101, 0)], 100)


def test_stage_d_pack_limit(tmp_path):
    pack = tmp_path / "sglang.tar.xz"
    with open(pack, "wb") as f:
        f.truncate(kit.STAGE_D_LIMIT)
    kit.check_stage_d([{"name": "sglang", "path": str(pack)}])
    kit.check_stage_d([{"name": "verl", "path": str(pack)}])
    with open(pack, "ab") as f:
        f.write(b"x")
    kit.check_stage_d([{"name": "verl", "path": str(pack)}])  # only the sglang pack is bound
    with pytest.raises(SystemExit, match="exceeds stage d's 50 MiB"):
        kit.check_stage_d([{"name": "sglang", "path": str(pack)}])


def test_stages_map_to_packs():
    assert kit.packs_for(["d"]) == ["sglang"] and kit.packs_for(["b"]) == []
    assert kit.packs_for(["e"]) == kit.packs_for(["a", "c"]) == ["sglang", "verl"]
    with pytest.raises(SystemExit, match="unknown stage 'z'"):
        kit.packs_for(["z"])


def test_verl_pack_skips_the_image_and_the_sglang_pack():
    want = kit.pack_pins("verl", kit.device_packages())
    assert {"verl", "ray", "tensordict", "hydra-core"} <= set(want)
    assert not {"torch", "numpy", "triton", "wandb"} & set(want)  # image, or SKIP
    assert not set(kit.SGLANG_PINS) & set(want)  # transformers, pydantic, ... come with sglang
    assert kit.runs_on_cp312("tokenizers-0.22.2-cp39-abi3-manylinux_2_17_x86_64.whl")
    assert not kit.runs_on_cp312("ray-2.60.0-cp311-cp311-manylinux2014_x86_64.whl")


def _kit(tmp_path, budget: int, payload: int = 300_000):
    """Two packs of a real (tiny) pack build: 'sglang' (incompressible, split when over budget)
    with a lib folder, and 'verl'."""
    big = _wheel(tmp_path, "kitbig", {"kitbig/__init__.py": b"VALUE = 42\n",
                                      "kitbig/blob.bin": os.urandom(payload)})
    small = _wheel(tmp_path, "kitsmall", {"kitsmall/__init__.py": b"VALUE = 7\n"})
    lib = tmp_path / "libnuma.so.1"
    lib.write_bytes(b"\x7fELF")
    packs = [kit.build_pack("sglang", {"kitbig": big}, [lib], tmp_path / "build", preset=0),
             kit.build_pack("verl", {"kitsmall": small}, [], tmp_path / "build", preset=0)]
    return kit.write_kit(packs, tmp_path / "kit", budget)


def _install(src, store, stages="a,b,c,d,e,f"):
    return subprocess.run([sys.executable, str(ROOT / "scripts/gpu/kit.py"), "install", "--from",
                           str(src), "--store", str(store), "--stages", stages],
                          capture_output=True, text=True)


def test_split_calls_reassemble_install_and_repeat_as_a_no_op(tmp_path):
    budget = 128 * 1024
    manifest = _kit(tmp_path, budget)
    sg = manifest["packs"][0]
    assert len(sg["parts"]) == 3 and all(p["size"] <= budget for p in sg["parts"])
    calls = sorted((tmp_path / "kit" / "send").iterdir())
    assert len(calls) == len(manifest["calls"]) == 3
    for c in calls:  # every call carries the whole manifest and at most the budget
        assert json.loads((c / "manifest.json").read_text()) == manifest
        assert sum(f.stat().st_size for f in c.iterdir() if f.name != "manifest.json") <= budget
    store = tmp_path / "store"
    first = _install(calls[0], store)
    assert first.returncode == 3, first.stderr
    assert "stage d waits for pack(s) sglang (send/02, send/03)" in first.stdout
    assert "stage b ready" in first.stdout
    assert _install(calls[1], store).returncode == 3
    last = _install(calls[2], store)
    assert last.returncode == 0, last.stderr
    assert "stage e ready" in last.stdout and "pack sglang unpacked" in last.stdout
    exports = [ln for ln in last.stdout.splitlines() if ln.startswith("export ")]
    assert (store / "env.sh").read_text().splitlines() == exports
    assert exports[0] == f"export PYTHONPATH={store}/sglang/site:{store}/verl/site:{ROOT}"
    assert exports[1].startswith(f"export LD_LIBRARY_PATH={store}/sglang/lib$")
    assert (store / "sglang/lib/libnuma.so.1").is_file()
    assert not list((store / "pieces").iterdir())  # pieces go once unpacked
    probe = subprocess.run(["bash", "-c", f"{exports[0]}; {sys.executable} -c "
                            "'import kitbig, kitsmall; print(kitbig.VALUE + kitsmall.VALUE)'"],
                           capture_output=True, text=True)
    assert probe.stdout.strip() == "49", probe.stderr
    # the same call again (and any call of this kit) changes nothing
    before = {p: p.stat().st_mtime_ns for p in store.rglob("*") if p.is_file()}
    again = _install(calls[2], store)
    assert again.returncode == 0 and "unpacked" not in again.stdout
    assert [ln for ln in again.stdout.splitlines() if ln.startswith("export ")] == exports
    assert {p: p.stat().st_mtime_ns for p in before} == before


def test_a_new_kit_replaces_an_installed_pack(tmp_path):
    (tmp_path / "old").mkdir()
    (tmp_path / "new").mkdir()
    old, new = _kit(tmp_path / "old", budget=1 << 30), _kit(tmp_path / "new", budget=1 << 30)
    assert old["packs"][0]["sha256"] != new["packs"][0]["sha256"]  # fresh random payloads
    store = tmp_path / "store"
    assert _install(tmp_path / "old/kit/send/01", store).returncode == 0
    res = _install(tmp_path / "new/kit/send/01", store)
    assert res.returncode == 0 and "pack sglang unpacked" in res.stdout
    assert kit.installed(store, new["packs"][0]) and not kit.installed(store, old["packs"][0])


def test_corrupt_piece_is_named_and_nothing_changes(tmp_path):
    _kit(tmp_path, 128 * 1024)
    calls = sorted((tmp_path / "kit" / "send").iterdir())
    part = next(p for p in calls[1].iterdir() if ".part" in p.name)
    data = bytearray(part.read_bytes())
    data[100] ^= 0xFF
    part.write_bytes(bytes(data))
    store = tmp_path / "store"
    assert _install(calls[0], store).returncode == 3
    before = sorted(p.name for p in (store / "pieces").iterdir())
    res = _install(calls[1], store)
    assert res.returncode not in (0, 3)
    assert f"{part.name}: sha256 mismatch" in res.stderr
    assert sorted(p.name for p in (store / "pieces").iterdir()) == before
    assert not (store / "sglang").exists()
