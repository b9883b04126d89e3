"""Packs into device calls: each call at most 64 MiB with the project tree, a pack larger than
one call split into parts, the manifest (sha256 of every pack and part) in every call, the
commit the kit was staged from."""
from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path

__all__ = ["MiB", "MANIFEST", "CALL_LIMIT", "MARGIN", "sha256", "tree_bytes", "call_budget",
           "split_file", "pack_calls", "write_kit", "stamp_commit"]

ROOT = Path(__file__).resolve().parents[3]
MANIFEST = "manifest.json"
MiB = 1 << 20
CALL_LIMIT = 64 * MiB       # the device tool's files per call, the project tree included
MARGIN = 1 * MiB            # the manifest, untracked scratch files, rounding


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


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
