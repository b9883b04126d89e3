"""The device side (standard library only): check every piece that came with a call against the
manifest before anything changes, keep pieces while the machine is held, reassemble, check and
unpack each pack once all its pieces are there, print and write the ``export`` lines."""
from __future__ import annotations

import json
import os
import shutil
import tarfile
from pathlib import Path

from .calls import MANIFEST, ROOT, sha256
from .recipe import PACKS, STAGE_PACKS, packs_for

__all__ = ["STORE", "pieces", "piece_ok", "installed", "unpack_pack", "env_lines", "install"]

STORE = Path(os.environ.get("SOFT_SPATIAL_GPUKIT_STORE", "/var/tmp/soft_spatial_gpukit"))


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


def install(store: Path, src: Path | None, stages: list[str] | None = None) -> int:
    """Take in what came with this call (``src``, a ``send/NN`` folder; None: what arrived
    before), unpack every pack whose pieces are all there, write ``env.sh``; print which of
    ``stages`` (default: all) are ready. Returns 0 when they are, 3 while pieces are missing."""
    if src is not None and not (src / MANIFEST).is_file():
        raise SystemExit(f"kit.py install: {src} holds no {MANIFEST}")
    if src is None and not (store / MANIFEST).is_file():
        raise SystemExit(f"kit.py install: nothing has arrived in {store} yet (use --from)")
    manifest = json.loads(((src or store) / MANIFEST).read_text())
    stages = stages or sorted(STAGE_PACKS)
    packs_for(stages)  # names an unknown stage
    todo = [e for e in manifest["packs"] if not installed(store, e)]
    arrived = _checked(todo, src)  # every piece of this call, before anything changes
    (store / "pieces").mkdir(parents=True, exist_ok=True)
    for f in arrived:
        shutil.copy2(f, store / "pieces" / f.name)
    write_if_changed(store / MANIFEST, json.dumps(manifest, indent=1))
    for e in todo:
        if all(piece_ok(store / "pieces", q) for q in pieces(e)):
            unpack_pack(store, e)
            print(f"kit.py install: pack {e['name']} unpacked into {store / e['name']}")
    ready = [e["name"] for e in manifest["packs"] if installed(store, e)]
    waiting = [s for s in stages if not _stage_ready(s, ready, manifest, store)]
    lines = env_lines(store, [p for p in PACKS if p in ready])
    write_if_changed(store / "env.sh", "\n".join(lines) + "\n")
    print("\n".join(lines))
    return 3 if waiting else 0


def _checked(todo: list[dict], src: Path | None) -> list[Path]:
    """The pieces of the packs ``todo`` that came in ``src``, each checked against the manifest
    (a corrupt one is named: nothing has changed yet)."""
    arrived = []
    for e in todo:
        for q in pieces(e):
            f = (src / q["name"]) if src is not None else None
            if f is not None and f.is_file():
                if f.stat().st_size != q["size"] or sha256(f) != q["sha256"]:
                    raise SystemExit(f"kit.py install: {q['name']}: sha256 mismatch (corrupt "
                                     f"piece of pack {e['name']}; send its call again)")
                arrived.append(f)
    return arrived


def _stage_ready(stage: str, ready: list[str], manifest: dict, store: Path) -> bool:
    """Whether ``stage``'s packs are installed; prints so, or which calls carry what is missing."""
    missing = [p for p in STAGE_PACKS[stage] if p not in ready]
    if not missing:
        print(f"kit.py install: stage {stage} ready")
        return True
    calls = sorted({i for e in manifest["packs"] if e["name"] in missing
                    for q in pieces(e) if not (store / "pieces" / q["name"]).is_file()
                    for i, names in enumerate(manifest["calls"], 1) if q["name"] in names})
    print(f"kit.py install: stage {stage} waits for pack(s) {', '.join(missing)} "
          f"(send/{', send/'.join(f'{i:02d}' for i in calls)})")
    return False
