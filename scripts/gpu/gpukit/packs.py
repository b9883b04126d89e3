"""A site into a pack: the trimmed wheels and shared libraries of one pack as a reproducible
``.tar.xz`` through xz's x86 branch converter (rebuilt only when its recipe changed)."""
from __future__ import annotations

import json
import lzma
import shutil
import tarfile
from pathlib import Path

from . import wheels as site
from .recipe import STAGE_PACKS, TRIM

__all__ = ["xz_filters", "tar_xz", "build_pack", "TAR_MTIME"]

TAR_MTIME = 1767225600  # 2026-01-01 UTC: every packed file's time


def xz_filters(preset: int) -> list[dict]:
    """The packs' xz chain: x86's branch converter, then LZMA2 at ``preset``, extreme. The converter
    turns the shared libraries' relative call targets absolute, which LZMA2 then finds repeated:
    on the 2026-11-28 verl pack 26.76 -> 25.70 MB (-4%); any xz reader undoes it (Python's tarfile
    on the device, ``xz -d``)."""
    return [{"id": lzma.FILTER_X86}, {"id": lzma.FILTER_LZMA2, "preset": preset | lzma.PRESET_EXTREME}]


def tar_xz(src: Path, dest: Path, preset: int = 9) -> None:
    """``src``'s contents as a reproducible .tar.xz (sorted names, no owners, one fixed time: one
    that zip files can hold too, so nothing that zips these files later trips over it), compressed
    with :func:`xz_filters`."""
    def clean(ti: tarfile.TarInfo) -> tarfile.TarInfo:
        ti.uid = ti.gid = 0
        ti.uname = ti.gname = ""
        ti.mtime = TAR_MTIME
        return ti

    with lzma.open(dest, "wb", format=lzma.FORMAT_XZ, filters=xz_filters(preset)) as xz, \
            tarfile.open(fileobj=xz, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for p in sorted(src.iterdir()):
            tar.add(p, arcname=p.name, filter=clean)


def build_pack(pack: str, wheels: dict[str, Path], libs: list[Path], build: Path,
               preset: int = 9) -> dict:
    """Unpack ``wheels`` (trimmed) into ``build/<pack>/site``, copy ``libs`` into ``lib/``, and
    pack both as ``build/<pack>.tar.xz``. Returns what the manifest records."""
    root, tar = build / pack, build / f"{pack}.tar.xz"
    recipe = json.dumps([sorted(w.name for w in wheels.values()), [p.name for p in libs],
                         {n: TRIM.get(n) for n in wheels}, site.FLASHINFER_JIT_SOURCES,
                         site.FLASHINFER_SEARCH, xz_filters(preset), TAR_MTIME], sort_keys=True)
    stamp = build / f"{pack}.recipe.json"
    if tar.is_file() and stamp.is_file() and json.loads(stamp.read_text())["recipe"] == recipe:
        # built from the same wheels and rules (perhaps in a copy of this folder elsewhere)
        return {**json.loads(stamp.read_text())["entry"], "path": str(tar)}
    shutil.rmtree(root, ignore_errors=True)
    (root / "site").mkdir(parents=True)
    dists, files, unpacked, dropped = [], 0, 0, 0
    for name, wheel in sorted(wheels.items()):
        s = site.unpack_wheel(wheel, root / "site", TRIM.get(name))
        dists.append(f"{name}=={wheel.name.split('-')[1]}")
        files, unpacked, dropped = files + s["files"], unpacked + s["bytes"], dropped + s["dropped_bytes"]
    if libs:
        (root / "lib").mkdir()
        for lib in libs:
            shutil.copy2(lib, root / "lib" / lib.name)
            files, unpacked = files + 1, unpacked + lib.stat().st_size
    tar_xz(root, tar, preset)
    entry = {"name": pack, "path": str(tar), "dists": dists, "libs": [p.name for p in libs],
             "files": files, "unpacked_bytes": unpacked, "trimmed_bytes": dropped,
             "stages": sorted(s for s, ps in STAGE_PACKS.items() if pack in ps)}
    stamp.write_text(json.dumps({"recipe": recipe, "entry": entry}))
    return entry
