"""Helpers of the GPU kit's stager tests (tests/bench/gpu/test_kit_*.py): scripts/gpu on the path
(``gpukit`` imports as ``scripts/gpu/kit.py`` imports it), small wheels, a folder's files."""
from __future__ import annotations

import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts" / "gpu"))


def make_wheel(dir_: Path, name: str, files: dict, version: str = "1.0", exe=()) -> Path:
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


def files_in(root: Path) -> set:
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}
