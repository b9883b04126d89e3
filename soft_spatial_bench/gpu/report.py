"""The GPU kit's live report: one JSON line per finished piece of work, appended the moment it
exists, and the Markdown report rebuilt from those lines after each one; what a job raises.

Every process of a plan (the parent and each child that measures) writes through
:class:`LiveReport` on the same two files, one process at a time, so a call killed at its timeout
still returns every finished number: ``results.jsonl`` has them all, and ``report.md`` is whole
(written to a temporary file and renamed). Each record carries its wall time (UTC) and its
seconds since the plan started.
"""
from __future__ import annotations

import datetime
import json
import os
import time
from collections.abc import Callable
from pathlib import Path

from soft_spatial.infra.jsonl import read_jsonl

__all__ = ["Skip", "JobFailed", "table", "LiveReport", "stamp"]


class Skip(Exception):
    """A piece of work cannot run here (missing package or device); the message says why."""


class JobFailed(Exception):
    """A job that failed after measuring part of what it measures: ``result`` is its kind's
    result as far as it got (for the report and ``results.jsonl``; None: nothing yet), the
    message names the failure."""

    def __init__(self, why: str, result=None):
        super().__init__(why)
        self.result = result


def table(head: list[str], rows: list[list]) -> list[str]:
    """A Markdown table (floats with 4 significant digits)."""
    def fmt(x):
        return f"{x:.4g}" if isinstance(x, float) else str(x)
    return (["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
            + ["| " + " | ".join(fmt(x) for x in r) + " |" for r in rows])


def stamp(t0: float, now: float | None = None) -> str:
    """``+123 s 15:01:02Z``: seconds since ``t0`` and the UTC wall time."""
    now = time.time() if now is None else now
    wall = datetime.datetime.fromtimestamp(now, datetime.timezone.utc).strftime("%H:%M:%SZ")
    return f"+{now - t0:.0f} s {wall}"


class LiveReport:
    """``results.jsonl`` and ``report.md`` in ``directory``.

    The first record (kind ``header``) holds the report's title lines and the plan's start time;
    every later record is a piece of work (``part``, ``job``, ``status``, ``values``, ``lines``,
    ``tail``). ``renderer(job records)`` turns them into the Markdown below the header's lines.
    """

    def __init__(self, directory: str | os.PathLike, renderer: Callable[[list], list[str]]):
        self.dir = Path(directory)
        self.jsonl, self.markdown = self.dir / "results.jsonl", self.dir / "report.md"
        self.renderer = renderer

    # -- writing --------------------------------------------------------------------------------
    def start(self, header: list[str], t0: float, **facts) -> None:
        """Begin a new report (an existing one is replaced) at ``t0`` (epoch s)."""
        self.dir.mkdir(parents=True, exist_ok=True)
        self.jsonl.unlink(missing_ok=True)
        self._append({"kind": "header", "t0": t0, "lines": header, **facts})

    def record(self, part: str, job: str, status: str, *, values: dict | None = None,
               lines: list[str] | None = None, tail: str | None = None, **extra) -> dict:
        """Append one record and rebuild the Markdown; print a progress line."""
        now = time.time()
        rec = {"kind": "job", "time": datetime.datetime.fromtimestamp(
                   now, datetime.timezone.utc).isoformat(timespec="seconds"),
               "elapsed_s": round(now - self.t0, 1), "part": part, "job": job, "status": status,
               "values": values or {}, "lines": lines or [], **extra}
        if tail:
            rec["tail"] = tail[-4000:]
        self._append(rec)
        print(f"[{stamp(self.t0, now)}] {part} {job}: {status}"
              + (f" {json.dumps(values, default=str)[:300]}" if values else ""), flush=True)
        return rec

    def _append(self, rec: dict) -> None:
        with open(self.jsonl, "a", encoding="utf-8") as f:
            f.write(json.dumps(rec, default=str) + "\n")
            f.flush()
            os.fsync(f.fileno())
        self.write_markdown()

    # -- reading --------------------------------------------------------------------------------
    def records(self) -> list[dict]:
        return read_jsonl(self.jsonl, drop_torn_tail=True) if self.jsonl.exists() else []

    @property
    def t0(self) -> float:
        head = next((r for r in self.records() if r.get("kind") == "header"), None)
        return head["t0"] if head else time.time()

    def write_markdown(self) -> None:
        recs = self.records()
        text = "\n".join(self.render(recs)) + "\n"
        tmp = self.markdown.with_name(self.markdown.name + ".tmp")
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(self.markdown)

    def render(self, recs: list[dict]) -> list[str]:
        head = next((r for r in recs if r.get("kind") == "header"), {"lines": []})
        return list(head["lines"]) + self.renderer([r for r in recs if r.get("kind") == "job"])
