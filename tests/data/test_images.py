"""A truncated image is refused when the benchmark loads, before any model loads, naming the
benchmark, the record and the file: PIL's ``verify()`` reads a JPEG's markers only, so the check
decodes the image (a JPEG at 1/8 scale, which still reads every byte of its scans)."""

from __future__ import annotations

import io
import json
import random
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from PIL import Image

from soft_spatial.data import DataFormatError, load_benchmark
from soft_spatial.data.fixtures import FixtureSet
from soft_spatial.eval import evaluate
from soft_spatial.eval import runner
from soft_spatial.eval.runner import EvalConfig
from soft_spatial.softthink import SoftThinkingConfig


def _jpeg(seed: int, size: tuple[int, int] = (64, 48)) -> bytes:
    """A noisy JPEG: its scan data is most of the file."""
    rng = random.Random(seed)
    image = Image.frombytes("RGB", size, bytes(rng.randrange(256) for _ in range(size[0] * size[1] * 3)))
    buffer = io.BytesIO()
    image.save(buffer, format="JPEG", quality=90)
    return buffer.getvalue()


def _truncated_jpeg(seed: int) -> bytes:
    data = _jpeg(seed)
    cut = data[: len(data) * 2 // 3]
    with Image.open(io.BytesIO(cut)) as image:
        image.verify()  # the premise: verify() passes a truncated JPEG
    return cut


def _mindcube_as_jpeg(fx: FixtureSet, bad: tuple[int, int]) -> tuple[Path, str, Path]:
    """The MindCube fixture with every view a JPEG (as the release ships them), view ``bad[1]`` of
    record ``bad[0]`` truncated; returns (table, id of the bad record, the bad file)."""
    table = fx.mindcube / "raw" / "MindCube_tinybench.jsonl"
    rows = [json.loads(line) for line in table.read_text().splitlines()]
    for i, row in enumerate(rows):
        row["images"] = [p.removesuffix(".png") + ".jpg" for p in row["images"]]
        for j, rel in enumerate(row["images"]):
            jpeg = _truncated_jpeg(i * 10 + j) if (i, j) == bad else _jpeg(i * 10 + j)
            (fx.mindcube / rel).write_bytes(jpeg)
    table.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return table, rows[bad[0]]["id"], fx.mindcube / rows[bad[0]]["images"][bad[1]]


def _assert_names(err: DataFormatError, benchmark: str, table: Path, index: int, record_id: str, field: str,
                  image: Path | None) -> None:
    message = str(err)
    assert (err.file, err.index, err.record_id, err.field) == (str(table), index, record_id, field)
    assert f"id {record_id!r}" in message and f"index {index}" in message
    assert f"{benchmark} image" in message  # the benchmark, not only a path that happens to contain its name
    if image is not None:
        assert str(image) in message
    assert "truncated" in message


def test_a_truncated_mindcube_jpeg_is_refused_at_load(fx: FixtureSet):
    table, record_id, image = _mindcube_as_jpeg(fx, bad=(2, 1))
    with pytest.raises(DataFormatError) as info:
        load_benchmark("mindcube", fx.mindcube)
    _assert_names(info.value, "mindcube", table, 2, record_id, "images", image)
    assert len(load_benchmark("mindcube", fx.mindcube, check_images=False)) == 6  # the check is the one refusing


def test_a_truncated_jpeg_is_refused_in_every_loader(fx: FixtureSet):
    # OmniSpatial's release loader (an image saved as JPEG under its .png name)
    image = fx.omnispatial_test / "Complex_Logic" / "8.png"
    image.write_bytes(_truncated_jpeg(1))
    with pytest.raises(DataFormatError) as info:
        load_benchmark("omnispatial", fx.omnispatial)
    _assert_names(info.value, "omnispatial", fx.omnispatial_test / "data.json", 9, "8_0", "image", image)
    # the generic layouts' image paths (here SpatiaLab's JSONL, image paths relative to the table)
    image = fx.spatialab / "images" / "3.jpg"
    image.write_bytes(_truncated_jpeg(2))
    table = fx.spatialab / "spatialab.jsonl"
    rows = [json.loads(line) for line in table.read_text().splitlines()]
    rows[3]["image"] = "images/3.jpg"
    table.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    with pytest.raises(DataFormatError) as info:
        load_benchmark("spatialab", table)
    _assert_names(info.value, "spatialab", table, 3, "sl_3", "image", image)
    # embedded bytes (a parquet's Hugging Face image struct)
    source = fx.spatialab / "spatialab.parquet"
    rows = pq.read_table(source).to_pylist()
    rows[4]["image"] = {"bytes": _truncated_jpeg(3), "path": None}
    bad = fx.spatialab / "bad.parquet"
    pq.write_table(pq.read_table(source).from_pylist(rows), bad)
    with pytest.raises(DataFormatError) as info:
        load_benchmark("spatialab", bad)
    _assert_names(info.value, "spatialab", bad, 4, "sl_4", "image", None)


def test_evaluation_refuses_a_truncated_jpeg_before_the_model_loads(fx: FixtureSet, tmp_path: Path,
                                                                     monkeypatch):
    table, record_id, image = _mindcube_as_jpeg(fx, bad=(5, 0))

    def no_model(cfg):
        raise AssertionError("the model was loaded before the data was checked")

    monkeypatch.setattr(runner, "_make_engine", no_model)
    out = tmp_path / "eval"
    cfg = EvalConfig(benchmarks=["mindcube"], data={"mindcube": str(fx.mindcube)}, model_path=str(tmp_path / "m"),
                     soft_thinking=SoftThinkingConfig(mode="hard"), output_dir=str(out), samples=1)
    with pytest.raises(DataFormatError) as info:
        evaluate(cfg, progress=False)
    _assert_names(info.value, "mindcube", table, 5, record_id, "images", image)
    assert not out.exists()  # refused before anything was written
