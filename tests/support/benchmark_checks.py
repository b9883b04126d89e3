"""Helpers of the benchmark loader tests: what an error names, an image's colour, edits to the
synthetic fixture files (`soft_spatial.data.fixtures`)."""
from __future__ import annotations

import json
from pathlib import Path

from PIL import Image

from soft_spatial.data import DataFormatError
from soft_spatial.data.fixtures import FixtureSet


def colour(image) -> tuple[int, int, int]:
    """The RGB colour of an image's first pixel (a fixture image is one solid colour)."""
    img = image if isinstance(image, Image.Image) else Image.open(image)
    return img.convert("RGB").getpixel((0, 0))


def assert_names(err: DataFormatError, file: Path, index: int, record_id: str | None, field: str) -> None:
    """``err`` names the file, the record (index, and id when given) and the field."""
    message = str(err)
    assert str(file) in message
    assert f"index {index}" in message
    if record_id is not None:
        assert f"id {record_id!r}" in message
    assert f"field {field!r}" in message
    assert (err.index, err.field) == (index, field)


def edit_omni(fx: FixtureSet, index: int, **changes) -> Path:
    """Change fields of record ``index`` of the OmniSpatial test split's data.json; its path."""
    path = fx.omnispatial_test / "data.json"
    data = json.loads(path.read_text())
    data[index].update(changes)
    path.write_text(json.dumps(data))
    return path


def truncate(path: Path, keep: int = 40) -> None:
    """Keep the first ``keep`` bytes of ``path`` (a corrupt image)."""
    path.write_bytes(path.read_bytes()[:keep])
