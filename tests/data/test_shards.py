"""Sharded tables (``test-00000-of-00002.parquet``, as Hugging Face snapshots ship them): a set loads
only whole. A shard missing (an interrupted download), a shard index past the count or shards that
disagree on the count are refused naming the directory and the missing file names, never scored as
if the shards present were the whole benchmark."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from soft_spatial.data import DataFormatError, load_benchmark
from soft_spatial.data.benchmarks import source_files
from soft_spatial.data.fixtures import write_fixtures

N_RECORDS = 10  # the OmniSpatial test fixture


@pytest.fixture(scope="module")
def fx(tmp_path_factory):
    return write_fixtures(tmp_path_factory.mktemp("shards") / "fx")


def _rows(fx, snapshot: Path) -> list[dict]:
    """The OmniSpatial fixture as lmms-eval's snapshot rows (``gt`` letter, ``image_path`` under the
    snapshot), the images copied beside them."""
    rows = []
    for r in json.loads((fx.omnispatial_test / "data.json").read_text()):
        rel = f"images/{r['task_type']}/{r['id'].split('_')[0]}.png"
        (snapshot / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(fx.omnispatial_test / rel.removeprefix("images/"), snapshot / rel)
        rows.append({"id": r["id"], "question": r["question"], "options": r["options"], "gt": "ABCD"[r["answer"]],
                     "task_type": r["task_type"], "sub_task_type": r["sub_task_type"], "image_path": rel})
    return rows


def _vlmevalkit(row: dict) -> dict:
    """The same row as VLMEvalKit's CSV/TSV columns (one column per option letter)."""
    options = dict(zip("ABCD", row["options"] + [""] * (4 - len(row["options"]))))
    return {"id": row["id"], "question": row["question"], **options, "answer": row["gt"],
            "task_type": row["task_type"], "sub_task_type": row["sub_task_type"], "image_path": row["image_path"]}


def _write(path: Path, rows: list[dict], fmt: str) -> None:
    if fmt == "parquet":
        pq.write_table(pa.Table.from_pylist(rows), path)
    elif fmt == "jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    else:
        rows = [_vlmevalkit(r) for r in rows]
        with path.open("w", newline="", encoding="utf-8") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)


def _snapshot(fx, tmp_path: Path, fmt: str, shards: dict[str, slice]) -> Path:
    """A snapshot whose ``data/`` holds the named shard files, each with its slice of the rows."""
    snapshot = tmp_path / "OmniSpatial"
    rows = _rows(fx, snapshot)
    (snapshot / "data").mkdir(parents=True)
    for name, part in shards.items():
        _write(snapshot / "data" / f"{name}.{fmt}", rows[part], fmt)
    return snapshot


FORMATS = ["parquet", "jsonl", "csv"]
HALVES = {"test-00000-of-00002": slice(0, 5), "test-00001-of-00002": slice(5, None)}


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_complete_shard_set_loads_whole(fx, tmp_path: Path, fmt: str):
    snapshot = _snapshot(fx, tmp_path, fmt, HALVES)
    records = load_benchmark("omnispatial", snapshot)
    assert [r.id for r in records] == [r.id for r in load_benchmark("omnispatial", fx.omnispatial)]
    # one shard named as the root stands for its whole set (and the run key hashes every shard)
    first = snapshot / "data" / f"test-00000-of-00002.{fmt}"
    assert len(load_benchmark("omnispatial", first)) == N_RECORDS
    assert [p.name for p in source_files("omnispatial", first)] == [f"{n}.{fmt}" for n in HALVES]


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("root", ["snapshot", "shard"])
def test_a_missing_shard_is_refused_naming_the_directory_and_the_file(fx, tmp_path: Path, fmt: str, root: str):
    snapshot = _snapshot(fx, tmp_path, fmt, HALVES)
    (snapshot / "data" / f"test-00001-of-00002.{fmt}").unlink()  # the interrupted download
    where = snapshot if root == "snapshot" else snapshot / "data" / f"test-00000-of-00002.{fmt}"
    with pytest.raises(DataFormatError) as info:
        load_benchmark("omnispatial", where)
    message = str(info.value)
    assert str(snapshot / "data") in message
    assert f"test-00001-of-00002.{fmt}" in message and "missing" in message
    with pytest.raises(DataFormatError, match=f"test-00001-of-00002.{fmt}"):
        source_files("omnispatial", where)  # evaluation's run key refuses it too


def test_every_missing_shard_is_named(fx, tmp_path: Path):
    snapshot = _snapshot(fx, tmp_path, "parquet", {"test-00001-of-00004": slice(0, 5)})
    with pytest.raises(DataFormatError) as info:
        load_benchmark("omnispatial", snapshot)
    message = str(info.value)
    for missing in ("test-00000-of-00004.parquet", "test-00002-of-00004.parquet", "test-00003-of-00004.parquet"):
        assert missing in message
    assert "missing" in message and str(snapshot / "data") in message


@pytest.mark.parametrize("shards", [
    {"test-00000-of-00002": slice(0, 5), "test-00001-of-00003": slice(5, None)},  # counts disagree
    {"test-00000-of-00001": slice(0, 5), "test-00001-of-00001": slice(5, None)},  # an index past the count
    {"test": slice(0, 5), "test-00000-of-00001": slice(5, None)},  # a whole table beside a shard of it
])
def test_an_inconsistent_shard_set_is_refused(fx, tmp_path: Path, shards: dict[str, slice]):
    snapshot = _snapshot(fx, tmp_path, "parquet", shards)
    with pytest.raises(DataFormatError) as info:
        load_benchmark("omnispatial", snapshot)
    assert str(snapshot / "data") in str(info.value)
    for name in shards:
        assert f"{name}.parquet" in str(info.value)


def test_a_spatialab_table_with_a_missing_shard_is_refused(fx, tmp_path: Path):
    root = tmp_path / "spatialab"
    shutil.copytree(fx.spatialab / "images", root / "images")
    lines = (fx.spatialab / "spatialab.jsonl").read_text().splitlines(keepends=True)
    (root / "test-00000-of-00002.jsonl").write_text("".join(lines[:3]), encoding="utf-8")
    with pytest.raises(DataFormatError) as info:
        load_benchmark("spatialab", root)
    assert str(root) in str(info.value) and "test-00001-of-00002.jsonl" in str(info.value)
    # a one-shard set is whole
    (root / "test-00000-of-00002.jsonl").rename(root / "test-00000-of-00001.jsonl")
    assert len(load_benchmark("spatialab", root)) == 3
