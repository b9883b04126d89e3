"""One writer per output: an exclusive lock holding the writer's pid.

* `DirLock`: an output *directory* written in place (a training run, an evaluation): the lock is
  ``<dir>/.lock``.
* `OutputLock`: an output that appears by a rename (``OUT.partial`` renamed to ``OUT``: the export),
  so the lock cannot live inside it: it is ``.<name>.lock`` beside it, removed when released.

The lock is filelock's (``flock`` on Unix), so the kernel releases it when its holder exits, however
it exits (a SIGKILLed run leaves no stale lock). A second writer fails at once (``timeout=0``) with
an error naming the holder; it never waits and never writes.

`check_dir_path`: a command's output directory that cannot be one (an existing file at the path,
or at a folder above it) is refused up front, in one line naming the setting, before anything is
written; `DirLock` refuses it too, naming the output, where a caller did not check first.
"""
from __future__ import annotations

import os
import socket
import sys
from pathlib import Path

from filelock import FileLock, Timeout

__all__ = ["DirLock", "OutputLock", "DirLockedError", "NotADirectoryOutput", "check_dir_path",
           "LOCK_NAME"]

LOCK_NAME = ".lock"


class DirLockedError(RuntimeError):
    """Another process holds the lock."""


class NotADirectoryOutput(NotADirectoryError):
    """An output directory's path is an existing file (or lies under one)."""


def check_dir_path(path: str | os.PathLike, setting: str) -> None:
    """Refuse ``path`` as a directory to write into when it cannot be one: a file (or a link to
    one, or a dangling link) at it or at the nearest existing folder above it. One line naming
    ``setting`` (``output_dir``, ``trainer.default_local_dir``, ``--out``, ...); reads only."""
    path = Path(path)
    for at in (path, *path.parents):
        if at.is_dir():
            return
        if at.exists() or at.is_symlink():
            what = "is an existing file" if at == path else f"lies under {at}, an existing file"
            named = (f"{setting} {path}" if " " in setting or setting.startswith("-")
                     else f"{setting}={path}")
            raise NotADirectoryOutput(f"{named} {what}, not a directory: choose another {setting} "
                                      f"(nothing was written)")


class _HolderLock:
    """An exclusive ``flock`` on ``lock_path`` for the output ``subject``; the lock file names the
    holder while it is held."""

    advice = "choose another directory"
    remove_on_release = False

    def __init__(self, lock_path: Path, subject: Path, what: str):
        self.path, self.subject, self.what = lock_path, subject, what
        self._lock: FileLock | None = None

    def acquire(self):
        self.path.parent.mkdir(parents=True, exist_ok=True)
        lock = FileLock(self.path, timeout=0)
        try:
            lock.acquire()
        except Timeout:
            try:
                holder = self.path.read_text(errors="replace").strip()
            except FileNotFoundError:  # its holder was just releasing it
                holder = ""
            raise DirLockedError(
                f"{self.what} {self.subject} is in use by {holder or 'unknown process'} (lock "
                f"{self.path}); wait for it to finish, stop it, or {self.advice}") from None
        cmd = " ".join(sys.argv)[:200]
        with open(self.path, "r+", encoding="utf-8") as f:  # the holder, for the error above
            f.truncate()
            f.write(f"pid {os.getpid()} on {socket.gethostname()} ({cmd})\n")
        self._lock = lock
        return self

    def release(self) -> None:
        if self._lock is None:
            return
        if self.remove_on_release:
            # unlinked while still held: a process that opened this file meanwhile finds it
            # unlinked once it gets the flock and does not count it as held (filelock checks)
            self.path.unlink(missing_ok=True)
        else:
            with open(self.path, "r+", encoding="utf-8") as f:
                f.truncate()
        self._lock.release()
        self._lock = None

    def __enter__(self):
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


class DirLock(_HolderLock):
    """``with DirLock(dir):`` — exclusive use of ``dir`` for the block (created if missing)."""

    def __init__(self, directory: str | os.PathLike, what: str = "output directory"):
        self.directory = Path(directory)
        super().__init__(self.directory / LOCK_NAME, self.directory, what)

    def acquire(self) -> "DirLock":
        check_dir_path(self.directory, self.what)
        self.directory.mkdir(parents=True, exist_ok=True)
        return super().acquire()


class OutputLock(_HolderLock):
    """``with OutputLock(path):`` — exclusive use of the output ``path`` (which need not exist) for
    the block, through ``.<name>.lock`` in its parent (created if missing); the lock file is
    removed when the block ends (a SIGKILLed holder leaves it, unlocked, for the next to reuse)."""

    advice = "choose another output"
    remove_on_release = True

    def __init__(self, path: str | os.PathLike, what: str = "output"):
        path = Path(path)
        super().__init__(path.parent / f".{path.name}.lock", path, what)
