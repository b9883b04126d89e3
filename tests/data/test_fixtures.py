"""The synthetic benchmark fixtures (`soft_spatial.data.fixtures`): every image is the solid colour
`FixtureSet.colours` says, no two alike, and the files are the same on every write."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
from PIL import Image

from soft_spatial.data.fixtures import SIZE, FixtureSet, write_fixtures


def test_spatialab_parquet_fixture_is_hf_image_struct(fx: FixtureSet):
    column = pq.read_table(fx.spatialab / "spatialab.parquet").column("image").to_pylist()
    assert set(column[0]) == {"bytes", "path"}


def test_every_image_is_its_own_solid_colour_and_a_second_write_is_identical(fx: FixtureSet, tmp_path: Path):
    pngs = sorted(fx.root.rglob("*.png"))
    assert sorted(fx.colours) == pngs and len(pngs) > 20
    for path in pngs:
        with Image.open(path) as image:
            assert image.size == SIZE and image.mode == "RGB"
            assert image.getcolors() == [(SIZE[0] * SIZE[1], fx.colours[path])]  # one colour only
    assert len(set(fx.colours.values())) == len(pngs)  # a test can tell which image went where
    again = write_fixtures(tmp_path / "again")
    files = sorted(p.relative_to(fx.root) for p in fx.root.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(again.root) for p in again.root.rglob("*") if p.is_file())
    for rel in files:
        assert (again.root / rel).read_bytes() == (fx.root / rel).read_bytes(), rel
