"""What made an output: the settings and input bytes behind it, recorded beside it and compared
before a re-run trusts it.

An output is trusted because *these settings* made it, never because it exists. Every lasting
output (a learning stage, a warm start, a training run, an evaluation, an ablation row) is a
`Keyed`: the output, and its **key**, a JSON object of the settings its bytes depend on (and the
code's version where it matters) and the content digests of its inputs (`file_sha256`,
`tree_fingerprint`, every byte), stored as a small JSON file beside the output (`Keyed.record`).
A re-run asks `Keyed.verdict` first:

* the same key: the output is this command's, skip (a finished stage re-run is a no-op);
* no key and no output: `Verdict.ABSENT` (nothing there yet); an output without a key (written
  before keys were kept, or not by its command) is refused, saying how to proceed;
* another key: `OutputKeyMismatch`, naming the key file and each field that differs
  (``settings.seed: 0 -> 1``), so one run's numbers are never reported under another's name;
  differences the output follows by contract (``redo_on``) are `Verdict.REDO` instead.

    stage = Keyed("the warm start", out, make_key({"seed": 1, "steps": 40}, {"data": data_dir}))
    if stage.verdict() is Verdict.SAME:
        return                        # done under these settings
    ... run the stage ...
    stage.record()

Digests: every hashed file is hashed whole with sha256, cached in
``$SOFT_SPATIAL_CACHE/file-sha256.json`` under the file's path and (device, inode, size, mtime,
ctime): any write changes the ctime, which cannot be set back, so a file is re-read only when it
changed (~1.4 GB/s on one core of the 2-core CPU the tests run on).
"""
from __future__ import annotations

import contextlib
import enum
import hashlib
import json
import os
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from soft_spatial.infra.atomic import write_text
from soft_spatial.infra.cache import cache_root

__all__ = ["SHA256_CACHE", "FINGERPRINT_SCHEME", "ANY", "Verdict", "OutputKeyMismatch", "Keyed",
           "stage_key", "file_sha256", "sha256_cache", "tree_fingerprint", "path_digest", "make_key",
           "differences", "record"]

SHA256_CACHE = "file-sha256.json"
FINGERPRINT_SCHEME = "sha256 of every byte of every file"


class Verdict(enum.Enum):
    """What `Keyed.verdict` found: nothing yet (``ABSENT``), the same key (``SAME``), or only
    differences the output follows (``REDO``: make it again)."""

    ABSENT = "absent"
    SAME = "same"
    REDO = "redo"


class OutputKeyMismatch(ValueError):
    """An output was made by other settings or inputs than the ones asked for."""


# -- digests -------------------------------------------------------------------------------------


def _stamp(st: os.stat_result) -> list[int]:
    """What any change of a file's content changes: a write updates the ctime, which (unlike the
    mtime) cannot be set back; a replaced file has another inode or ctime."""
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def _cache_path() -> Path:
    return cache_root() / SHA256_CACHE


def _read_cache(path: Path) -> dict[str, Any]:
    try:
        cache = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}  # no cache yet, or unreadable: every file is hashed
    return cache if isinstance(cache, dict) else {}


def _settled(stamp: list[int]) -> bool:
    """A digest may be cached once a later write would show in the stamp: on a file system with
    whole-second timestamps, a write within the same second as the hashing would not."""
    fine = stamp[3] % 1_000_000_000 or stamp[4] % 1_000_000_000
    return bool(fine) or time.time_ns() - max(stamp[3], stamp[4]) > 2_000_000_000


def file_sha256(path: str | Path, cache: dict[str, Any] | None = None) -> str:
    """sha256 of a file's content, every byte. With ``cache`` (from `sha256_cache`), a digest
    recorded under the file's current stamp is reused, a new one is recorded."""
    path = Path(path).resolve()
    before = _stamp(path.stat())
    hit = (cache or {}).get(str(path))
    if isinstance(hit, dict) and hit.get("stamp") == before:
        return hit["sha256"]
    with open(path, "rb") as f:
        digest = hashlib.file_digest(f, "sha256").hexdigest()
    if cache is not None and _stamp(path.stat()) == before and _settled(before):
        cache[str(path)] = {"stamp": before, "sha256": digest}
    return digest


def _write_cache(path: Path, cache: dict[str, Any], old: dict[str, Any]) -> None:
    """Save ``cache`` when it changed, without the entries of files that are gone or changed. A
    cache that cannot be written only costs time (the next run hashes again)."""
    for name, entry in list(cache.items()):
        try:
            current = _stamp(os.stat(name))
        except OSError:
            current = None
        if not isinstance(entry, dict) or entry.get("stamp") != current:
            del cache[name]
    if cache != old:
        with contextlib.suppress(OSError):
            write_text(path, json.dumps(cache) + "\n")


@contextlib.contextmanager
def sha256_cache() -> Iterator[dict[str, Any]]:
    """The digest cache for a block of `file_sha256` calls: read once, written once at the end."""
    path = _cache_path()
    old = _read_cache(path)
    cache = json.loads(json.dumps(old))
    yield cache
    _write_cache(path, cache, old)


def tree_fingerprint(root: str | Path, cache: dict[str, Any] | None = None) -> str:
    """A content fingerprint of a directory: every file by relative name, size and the sha256 of
    every byte. Hidden files and folders (caches, locks, key files) do not define the content."""
    root = Path(root)
    h = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        if any(part.startswith(".") for part in path.relative_to(root).parts):
            continue
        rel = path.relative_to(root).as_posix()
        h.update(f"{rel}\0{path.stat().st_size}\0{file_sha256(path, cache)}\0".encode())
    return h.hexdigest()


def path_digest(path: str | Path, cache: dict[str, Any] | None = None) -> str:
    """`file_sha256` of a file, `tree_fingerprint` of a directory; a missing path is an error
    naming it."""
    path = Path(path)
    if path.is_dir():
        return tree_fingerprint(path, cache)
    if path.is_file():
        return file_sha256(path, cache)
    raise FileNotFoundError(f"{path}: no such file or directory (an input of a keyed output)")


# -- keys ----------------------------------------------------------------------------------------


def make_key(settings: Mapping[str, Any], inputs: Mapping[str, str | Path] | None = None,
             ) -> dict[str, Any]:
    """The key of an output: ``settings`` (JSON-able: what its bytes depend on) and the digest of
    every input path (a file or a directory), named as in ``inputs``. Returned in its JSON view
    (tuples become lists), so it compares equal to what `Keyed.recorded` reads back."""
    digests: dict[str, Any] = {}
    if inputs:
        with sha256_cache() as cache:
            for name, path in inputs.items():
                digests[name] = {"path": str(Path(path).resolve()), "sha256": path_digest(path, cache)}
    key = {"settings": dict(settings), "inputs": digests}
    return json.loads(json.dumps(key))


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for k, v in value.items():
            out.update(_flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    return {prefix: value}


def differences(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """``"key: old -> new"`` for every leaf that differs (dotted keys; ``(absent)`` where one side
    lacks it)."""
    a, b = _flatten(dict(old)), _flatten(dict(new))
    show = lambda d, k: d[k] if k in d else "(absent)"  # noqa: E731
    return [f"{k}: {show(a, k)} -> {show(b, k)}" for k in sorted(set(a) | set(b))
            if k not in a or k not in b or a[k] != b[k]]


#: ``redo_on`` of an output that only follows others: any difference makes it again
ANY = ("",)


@dataclass
class Keyed:
    """A lasting output and its key, recorded at ``key_path`` (``<output>.key.json`` unless
    ``at`` says where). ``redo_on``: the key paths whose differences mean "make it again" (the
    output follows an upstream output that changed by contract), not "refuse"; `ANY` for an output
    that only follows others (its key recorded once it is complete). ``hint`` (what the user can
    do) ends a refusal; ``unkeyed`` refuses an output without a key."""

    what: str
    output: Path
    key: dict
    redo_on: tuple[str, ...] = ()
    at: Path | None = None
    hint: str = ""
    unkeyed: str = ""
    error: ClassVar[type[OutputKeyMismatch]] = OutputKeyMismatch  # the refusals' type

    @property
    def key_path(self) -> Path:
        return self.at or self.output.with_name(self.output.name + ".key.json")

    @property
    def derived(self) -> bool:
        return self.redo_on == ANY

    def recorded(self) -> dict[str, Any] | None:
        """The key recorded for the output (None: none); a file that is not a JSON object is
        refused, naming it."""
        try:
            key = json.loads(self.key_path.read_text(encoding="utf-8"))
            problem = "" if isinstance(key, dict) else "not a JSON object"
        except FileNotFoundError:
            return None
        except ValueError as exc:
            problem = f"not valid JSON ({exc})"
        if problem:
            raise self.error("\n".join(filter(None, (
                f"{self.key_path}: {problem}; the output beside it cannot be trusted", self.hint))))
        return key

    def verdict(self) -> Verdict:
        """`Verdict.SAME`, `Verdict.ABSENT` (no key and no output yet) or `Verdict.REDO`; refuses
        an output of other settings, naming each difference, and one without a key. Reads only."""
        old = self.recorded()
        if old is None:
            if not self.output.exists():
                return Verdict.ABSENT
            if self.derived:
                return Verdict.REDO
            raise self.error(self.unkeyed or f"{self.what}: {self.output} has no key "
                             f"({self.key_path.name}), so nothing says these settings made it")
        diff = differences(old, self.key)
        if not diff:
            return Verdict.SAME
        if self.redo_on and all(d.startswith(self.redo_on) for d in diff):
            return Verdict.REDO
        raise self.refusal(old, diff)

    def refusal(self, old: Mapping[str, Any], diff: list[str]) -> OutputKeyMismatch:
        """The refusal of an output made by other settings: what differs, then the hint."""
        return self.error(
            f"{self.what} in {self.key_path.parent} was made with other settings or inputs than "
            f"these; what differs (recorded in {self.key_path} -> requested):\n  "
            + "\n  ".join(diff) + (f"\n{self.hint}" if self.hint else ""))

    def record(self) -> None:
        self.key_path.parent.mkdir(parents=True, exist_ok=True)
        record(self.key_path, self.key)


def stage_key(settings: Mapping[str, Any], **inputs: Keyed) -> dict[str, Any]:
    """A key of ``settings`` and of the settings behind each input's key (so a changed upstream
    output changes the key of every output made from it)."""
    return make_key({**settings, "inputs": {n: k.key["settings"] for n, k in inputs.items()}})


def record(path: str | Path, key: Mapping[str, Any]) -> None:
    """Store ``key`` at ``path`` atomically; a key already there and equal is not rewritten (a
    finished run re-run changes no file, whatever layout the key was written in)."""
    path = Path(path)
    key = json.loads(json.dumps(dict(key)))
    with contextlib.suppress(OSError, ValueError):
        if json.loads(path.read_text(encoding="utf-8")) == key:
            return
    write_text(path, json.dumps(key, indent=2, sort_keys=True) + "\n")
