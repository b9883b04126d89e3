"""A site into a pack (scripts/gpu/gpukit/packs.py): reproducible (the same wheels give the same
bytes, a copied build folder is reused), executable bits and the fixed time kept, and machine
code compressed through xz's x86 branch converter, which any xz reader undoes."""
import os
import shutil
from pathlib import Path

from kit_helpers import make_wheel

from gpukit import calls, install, packs


def test_pack_is_reproducible_and_keeps_executable_bits(tmp_path):
    wheel = make_wheel(tmp_path, "probe", {"probe/__init__.py": b"A = 1\n", "probe/tool": b"#!/bin/sh\n"},
                   exe={"probe/tool"})
    lib = tmp_path / "libx.so.1"
    lib.write_bytes(b"\x7fELF lib")
    a = packs.build_pack("verl", {"probe": wheel}, [lib], tmp_path / "b1", preset=1)
    b = packs.build_pack("verl", {"probe": wheel}, [lib], tmp_path / "b2", preset=1)
    assert calls.sha256(Path(a["path"])) == calls.sha256(Path(b["path"]))
    shutil.copytree(tmp_path / "b1", tmp_path / "moved")  # a copied build folder is reused as is
    moved = tmp_path / "moved" / "verl.tar.xz"
    written = moved.stat().st_mtime_ns
    c = packs.build_pack("verl", {"probe": wheel}, [lib], tmp_path / "moved", preset=1)
    assert c == {**a, "path": str(moved)} and moved.stat().st_mtime_ns == written
    assert a["files"] == 5 and a["dists"] == ["probe==1.0"] and a["stages"] == ["c", "e"]
    store = tmp_path / "store"
    e = {"name": "verl", "file": "verl.tar.xz", "size": Path(a["path"]).stat().st_size,
         "sha256": calls.sha256(Path(a["path"]))}
    (store / "pieces").mkdir(parents=True)
    (store / "pieces" / "verl.tar.xz").write_bytes(Path(a["path"]).read_bytes())
    install.unpack_pack(store, e)
    assert os.access(store / "verl/site/probe/tool", os.X_OK)
    assert (store / "verl/site/probe/tool").stat().st_mtime == packs.TAR_MTIME
    assert (store / "verl/lib/libx.so.1").read_bytes() == b"\x7fELF lib"
    assert install.installed(store, e) and not list((store / "pieces").iterdir())


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
    packs.tar_xz(tmp_path / "src", tmp_path / "p.tar.xz", preset=6)
    with tarfile.open(tmp_path / "p.tar.xz", "r:xz") as tar:
        assert tar.extractfile("libcode.so").read() == code
    plain = len(lzma.compress(code, preset=6 | lzma.PRESET_EXTREME))
    assert len(lzma.compress(code, format=lzma.FORMAT_XZ, filters=packs.xz_filters(6))) < 0.8 * plain
