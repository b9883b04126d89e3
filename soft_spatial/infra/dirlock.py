"""One writer per output directory: an exclusive lock on ``<dir>/.lock`` holding the writer's pid.

The lock is filelock's (``flock`` on Unix), so the kernel releases it when its holder exits, however
it exits (a SIGKILLed run leaves no stale lock). A second writer fails at once (``timeout=0``) with
an error naming the holder; it never waits and never writes.
"""
from __future__ import annotations

import os
import socket
import sys
from pathlib import Path

from filelock import FileLock, Timeout

__all__ = ["DirLock", "DirLockedError", "LOCK_NAME"]

LOCK_NAME = ".lock"


class DirLockedError(RuntimeError):
    """Another process holds the directory's lock."""


class DirLock:
    """``with DirLock(dir):`` — exclusive use of ``dir`` for the block (created if missing)."""

    def __init__(self, directory: str | os.PathLike, what: str = "output directory"):
        self.directory = Path(directory)
        self.path = self.directory / LOCK_NAME
        self.what = what
        self._lock: FileLock | None = None

    def acquire(self) -> "DirLock":
        self.directory.mkdir(parents=True, exist_ok=True)
        lock = FileLock(self.path, timeout=0)
        try:
            lock.acquire()
        except Timeout:
            holder = self.path.read_text(errors="replace").strip() or "unknown process"
            raise DirLockedError(
                f"{self.what} {self.directory} is in use by {holder} (lock {self.path}); wait for "
                f"it to finish, stop it, or choose another directory") from None
        cmd = " ".join(sys.argv)[:200]
        with open(self.path, "r+", encoding="utf-8") as f:  # the holder, for the error above
            f.truncate()
            f.write(f"pid {os.getpid()} on {socket.gethostname()} ({cmd})\n")
        self._lock = lock
        return self

    def release(self) -> None:
        if self._lock is not None:
            with open(self.path, "r+", encoding="utf-8") as f:
                f.truncate()
            self._lock.release()
            self._lock = None

    def __enter__(self) -> "DirLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()
