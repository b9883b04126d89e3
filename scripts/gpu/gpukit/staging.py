"""Staging, here with network: the verl pack's closure in this Python, the wheels for CPython
3.12 (pip's cache), libnuma from Debian, each pack built and the kit written as device calls."""
from __future__ import annotations

import io
import posixpath
import subprocess
import sys
import tarfile
import time
from pathlib import Path

from .calls import MiB, ROOT, call_budget, stamp_commit, tree_bytes, write_kit
from .packs import build_pack
from .recipe import (ALWAYS_CARRY, NUMA, PLATFORMS, SGLANG_PINS, SKIP, VERL_ROOTS,
                     VERL_UNDECLARED, norm, packs_for)

__all__ = ["device_packages", "closure", "pack_pins", "runs_on_cp312", "download", "fetch_numa",
           "check_stage_d", "stage", "STAGE_D_LIMIT"]

HERE = Path(__file__).resolve().parents[1]  # scripts/gpu: device-packages.txt
STAGE_D_LIMIT = 50 * MiB    # what stage d (the sglang pack) may take of one call


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


def check_stage_d(built: list[dict]) -> None:
    """Stage d must fit one call with room to spare: the sglang pack alone within STAGE_D_LIMIT."""
    for p in built:
        size = Path(p["path"]).stat().st_size
        if p["name"] == "sglang" and size > STAGE_D_LIMIT:
            raise SystemExit(f"kit.py stage: the sglang pack ({size / MiB:.1f} MiB) exceeds stage "
                             f"d's {STAGE_D_LIMIT / MiB:.0f} MiB; trim more (TRIM)")


def stage(out: Path, stages: list[str], preset: int = 9) -> None:
    """Download, trim and pack what ``stages`` need into ``out/build``, and write the kit as
    device calls (``out/send/NN``, each with the manifest and ``COMMIT``); print the calls."""
    t0 = time.time()
    packs = packs_for(stages)
    if not packs:
        print(f"kit.py stage: stages {','.join(stages)} need nothing beyond the device image")
        return
    on_device = device_packages()
    built = []
    for pack in packs:
        pins = pack_pins(pack, on_device)
        print(f"kit.py stage: pack {pack}: {len(pins)} distributions: "
              f"{' '.join(f'{n}=={v}' for n, v in sorted(pins.items()))}")
        wheels = download(pins, out / "wheels")
        libs = [fetch_numa(out)] if pack == "sglang" else []
        built.append(build_pack(pack, wheels, libs, out / "build", preset))
    check_stage_d(built)
    tree = tree_bytes()
    manifest = write_kit(built, out, call_budget(tree))
    stamp_commit(out / "send")
    _print_kit(manifest, out, tree, time.time() - t0)


def _print_kit(manifest: dict, out: Path, tree: int, seconds: float) -> None:
    for p in manifest["packs"]:
        print(f"  pack {p['name']}: {p['size'] / MiB:.2f} MiB xz, {p['files']} files, "
              f"{p['unpacked_bytes'] / MiB:.1f} MiB unpacked ({p['trimmed_bytes'] / MiB:.0f} MiB "
              f"trimmed away), {len(p['dists'])} distributions, stages {','.join(p['stages'])}"
              + (f", {len(p['parts'])} parts" if "parts" in p else ""))
    print(f"kit.py stage: {len(manifest['calls'])} device call(s), project tree "
          f"{tree / MiB:.2f} MiB, budget {manifest['budget_bytes'] / MiB:.1f} MiB per call, "
          f"{seconds:.0f} s:")
    for i, names in enumerate(manifest["calls"], 1):
        d = out / "send" / f"{i:02d}"
        size = sum(f.stat().st_size for f in d.iterdir())
        print(f"  carry [\"{d.relative_to(ROOT) if d.is_relative_to(ROOT) else d}\"]: "
              f"{size / MiB:.2f} MiB + tree = {(size + tree) / MiB:.2f} MiB ({', '.join(names)}), "
              f"{(manifest['budget_bytes'] - size) / MiB:.2f} MiB to spare")
    if len(manifest["calls"]) > 1:
        print(f"kit.py stage: WARNING: the kit needs {len(manifest['calls'])} calls: docs/gpu.md's "
              "one-call recipes break (see its 'When the kit needs two calls')", file=sys.stderr)
