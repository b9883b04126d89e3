"""One writer per output directory: an exclusive lock on ``<dir>/.lock`` holding the writer's pid.

The lock is ``flock``-based, so the kernel releases it when its holder exits, however it exits
(a SIGKILLed run leaves no stale lock). A second writer fails at once with an error naming the
holder; it never waits and never writes.
"""
from __future__ import annotations

import fcntl
import os
import socket
import sys
from pathlib import Path

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
        self._fd: int | None = None

    def acquire(self) -> "DirLock":
        self.directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 4096, 0).decode(errors="replace").strip() or "unknown process"
            os.close(fd)
            raise DirLockedError(
                f"{self.what} {self.directory} is in use by {holder} (lock {self.path}); wait for "
                f"it to finish, stop it, or choose another directory") from None
        os.ftruncate(fd, 0)
        cmd = " ".join(sys.argv)[:200]
        os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()} ({cmd})\n".encode(), 0)
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is not None:
            os.ftruncate(self._fd, 0)
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> "DirLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()
