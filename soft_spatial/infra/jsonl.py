"""Reading JSON Lines files: the one reader for benchmark records, evaluation results and
per-step data (writers append one ``json.dumps(...) + "\\n"`` per record)."""
from __future__ import annotations

import json
from os import PathLike
from pathlib import Path
from typing import Any

__all__ = ["JSONLError", "read_jsonl"]


class JSONLError(ValueError):
    """A line of a JSONL file is not JSON; names the file and the line (1-based)."""

    def __init__(self, path, line: int, error: Exception):
        self.path, self.line, self.error = str(path), line, error
        super().__init__(f"{path}: line {line}: invalid JSON: {error}")


def read_jsonl(path: str | PathLike, *, drop_torn_tail: bool = False, numbered: bool = False) -> list[Any]:
    """The records of ``path``, one per line (blank lines skipped; lines end at ``"\\n"`` only,
    so a record may hold any other line separator); with ``numbered``, ``(line, record)`` pairs
    (1-based), for errors about a record's content.

    A line that is not JSON raises :class:`JSONLError`; with ``drop_torn_tail`` a bad *last* line
    (a crash mid-write) is dropped instead.
    """
    lines = Path(path).read_text(encoding="utf-8").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    rows = []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            if drop_torn_tail and i == len(lines) - 1:
                break
            raise JSONLError(path, i + 1, exc) from None
        rows.append((i + 1, record) if numbered else record)
    return rows
