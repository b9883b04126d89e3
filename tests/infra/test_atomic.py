"""Atomic writes (`soft_spatial.infra.atomic`): an output appears whole or not at all, and an error
mid-write leaves the previous content (or nothing) and no temporary file."""

from __future__ import annotations

from pathlib import Path

import pytest


def test_atomic_writes_leave_old_content_on_error(tmp_path: Path):
    from soft_spatial.infra.atomic import atomic_dir, atomic_open, write_text

    target = tmp_path / "summary.json"
    write_text(target, "old")
    with pytest.raises(RuntimeError):
        with atomic_open(target) as f:
            f.write("half")
            raise RuntimeError("crash mid-write")
    assert target.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["summary.json"]
    write_text(target, "new")
    assert target.read_text() == "new" and oct(target.stat().st_mode & 0o777) != oct(0o600)
    with pytest.raises(RuntimeError):
        with atomic_dir(tmp_path / "model") as d:
            (d / "config.json").write_text("{}")
            raise RuntimeError("crash mid-build")
    assert not (tmp_path / "model").exists()
    with atomic_dir(tmp_path / "model") as d:
        (d / "config.json").write_text("{}")
    assert (tmp_path / "model" / "config.json").read_text() == "{}"
    with pytest.raises(FileExistsError):
        with atomic_dir(tmp_path / "model"):
            pass
