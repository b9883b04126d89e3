"""A wheel into a site: unpacked as ``pip install --target`` lays it out, trimmed by its rule
(:data:`.recipe.TRIM`), flashinfer's JIT sources kept as far as the builds it runs on the device
read them (the ``#include`` closure)."""
from __future__ import annotations

import fnmatch
import posixpath
import re
import shutil
import zipfile
from pathlib import Path

__all__ = ["include_closure", "flashinfer_jit_keep", "kept", "unpack_wheel",
           "FLASHINFER_JIT_SOURCES", "FLASHINFER_SEARCH"]

# flashinfer 0.6.11's JIT modules we build on the device (jit/norm.py: gen_norm_module; the
# attention and cascade modules below) and its
# include path in search order (jit/cpp_ext.py: get_cccl_includes, then get_system_includes), all
# under flashinfer/data. Files of flashinfer's own roots are kept one by one as the #include closure
# reaches them; a vendored library root (CCCL, CUTLASS, spdlog) that it reaches is kept whole, since
# those use computed includes (#include MACRO(...)) that no scan can follow.
FLASHINFER_DATA = "flashinfer/data"
FLASHINFER_JIT_SOURCES = {
    "jit/norm.py": ["csrc/norm.cu", "csrc/flashinfer_norm_binding.cu"],
    # SGLang's flashinfer attention backend (what verl 0.9.1 picks): batch decode and prefill, FA2
    # and the sm90 templates (gen_customize_batch_{decode,prefill}_module: the files they copy
    # or render; the kernel .cu files they write are generated), and cascade's merge_state
    # (extend with a cached prefix). Measured on 0.6.11.post1: 946 files, +1.1 MiB of xz.
    "jit/attention/modules.py": [
        "csrc/batch_decode.cu", "csrc/batch_decode_jit_binding.cu",
        "csrc/batch_decode_customize_config.jinja", "csrc/batch_decode_kernel_inst.jinja",
        "csrc/batch_prefill.cu", "csrc/batch_prefill_jit_binding.cu",
        "csrc/batch_prefill_customize_config.jinja", "csrc/batch_prefill_paged_kernel_inst.jinja",
        "csrc/batch_prefill_ragged_kernel_inst.jinja", "csrc/batch_prefill_sm90.cu",
        "csrc/batch_prefill_sm90_jit_binding.cu", "csrc/batch_prefill_sm90_customize_config.jinja",
        "csrc/batch_prefill_paged_sm90_kernel_inst.jinja",
        "csrc/batch_prefill_ragged_sm90_kernel_inst.jinja", "csrc/batch_prefill_fp8_sm90.cu",
        "csrc/batch_prefill_fp8_paged_sm90_kernel_inst.jinja",
        "csrc/batch_prefill_fp8_ragged_sm90_kernel_inst.jinja"],
    "jit/cascade.py": ["csrc/cascade.cu", "csrc/flashinfer_cascade_binding.cu"],
}
FLASHINFER_OWN = ("include", "csrc")
FLASHINFER_SEARCH = ["cccl/cub", "cccl/libcudacxx/include", "cccl/thrust", "include", "csrc",
                     "cutlass/include", "cutlass/tools/util/include", "spdlog/include"]
INCLUDE = re.compile(rb'^[ \t]*#[ \t]*include[ \t]*([<"])([^>"\n]+)[>"]', re.M)


def include_closure(sources: list[str], search: list[str], read) -> tuple[set, set]:
    """(files reached, names found nowhere) following #include from ``sources`` over POSIX paths:
    ``"x"`` is looked up beside the including file first, then (like ``<x>``) in ``search`` order.
    ``read(path)`` gives a file's bytes or None when there is none. Every include counts, also
    those under #if (a superset of what one configuration compiles)."""
    seen, todo, outside = set(), list(sources), set()
    while todo:
        f = todo.pop()
        if f in seen:
            continue
        text = read(f)
        if text is None:
            raise FileNotFoundError(f"{f}: a JIT source is missing")
        seen.add(f)
        for quote, name in INCLUDE.findall(text):
            name = name.decode().strip()
            dirs = ([posixpath.dirname(f)] if quote == b'"' else []) + search
            hits = (posixpath.normpath(posixpath.join(d, name)) for d in dirs)
            hit = next((h for h in hits if read(h) is not None), None)
            (outside.add(name) if hit is None else todo.append(hit))
    return seen, outside


def flashinfer_jit_keep(names: list[str], read) -> set[str]:
    """The members of flashinfer's wheel under flashinfer/data that its JIT modules in
    FLASHINFER_JIT_SOURCES read: their sources, the own headers they reach, and each vendored
    include root they reach, whole. Raises if the wheel's jit/*.py no longer names a source."""
    data = FLASHINFER_DATA + "/"
    present = set(names)
    sources = []
    for module, files in FLASHINFER_JIT_SOURCES.items():
        text = read(f"flashinfer/{module}") or b""
        for f in files:
            if f'"{posixpath.basename(f)}"'.encode() not in text:  # a quoted file name
                raise SystemExit(f"kit.py: flashinfer/{module} no longer builds {f}; update "
                                 f"FLASHINFER_JIT_SOURCES in scripts/gpu/gpukit/{Path(__file__).name}")
            sources.append(data + f)
    reached, _ = include_closure(sources, [data + d for d in FLASHINFER_SEARCH],
                                 lambda p: read(p) if p in present else None)
    keep = {p for p in reached if p[len(data):].split("/")[0] in FLASHINFER_OWN}
    roots = {data + d + "/" for d in FLASHINFER_SEARCH if d.split("/")[0] not in FLASHINFER_OWN
             and any(p.startswith(data + d + "/") for p in reached)}
    return keep | {n for n in names if any(n.startswith(r) for r in roots)}


def kept(member: str, rule: dict | None) -> bool:
    """Whether a wheel member survives a TRIM rule."""
    if rule is None or not any(fnmatch.fnmatchcase(member, p) for p in rule["drop"]):
        return True
    return any(fnmatch.fnmatchcase(member, p) for p in rule["keep"])


def unpack_wheel(wheel: Path, site: Path, rule: dict | None = None) -> dict:
    """Unpack a wheel into ``site`` as ``pip install --target`` lays it out (``*.data/purelib``
    and ``platlib`` to the top, scripts/headers/data left out, executable bits kept), skipping
    what ``rule`` drops. Returns counts of files and bytes kept and dropped."""
    stats = {"files": 0, "bytes": 0, "dropped_files": 0, "dropped_bytes": 0}
    with zipfile.ZipFile(wheel) as z:
        names = [i.filename for i in z.infolist() if not i.is_dir()]
        if rule is not None and rule.get("jit"):
            rule = {**rule, "keep": rule["keep"] + sorted(flashinfer_jit_keep(
                names, lambda p: z.read(p) if p in z.NameToInfo else None))}
        for info in z.infolist():
            name = info.filename
            if info.is_dir():
                continue
            parts = name.split("/")
            if parts[0].endswith(".data"):
                if len(parts) < 3 or parts[1] not in ("purelib", "platlib"):
                    continue
                name = "/".join(parts[2:])
            if not kept(name, rule):
                stats["dropped_files"] += 1
                stats["dropped_bytes"] += info.file_size
                continue
            dest = site / name
            dest.parent.mkdir(parents=True, exist_ok=True)
            with z.open(info) as src, open(dest, "wb") as out:
                shutil.copyfileobj(src, out, 1 << 20)
            dest.chmod(0o755 if (info.external_attr >> 16) & 0o111 else 0o644)
            stats["files"] += 1
            stats["bytes"] += info.file_size
    return stats
