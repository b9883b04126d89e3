"""Task-type subsets (`soft_spatial.data.subsets`): a name selects the records whose task type or
sub-type it is, on benchmark records and on verl's parquet alike; a name no record has is an error
listing the available ones. Checked against the subsets computed here by hand."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from soft_spatial.data import load_benchmark
from soft_spatial.data.fixtures import FixtureSet
from soft_spatial.data.subsets import filter_parquet, normalise_task_types, subset_indices


def test_subset_indices_select_task_types_and_sub_types(fixture_set: FixtureSet):
    records = load_benchmark("omnispatial", fixture_set.omnispatial)
    assert subset_indices(records, None) == subset_indices(records, []) == list(range(len(records)))
    for names in (["Perspective_Taking"], "Perspective_Taking", ["Egocentric", "Complex_Logic"],
                  ("Allocentric", "Perspective_Taking")):
        wanted = normalise_task_types(names)
        assert subset_indices(records, names) == [i for i, r in enumerate(records)
                                                  if r.category in wanted or r.subcategory in wanted]
    assert subset_indices(records, ["Perspective_Taking"]) == [0, 1, 2]  # the fixture's positions
    with pytest.raises(ValueError, match=r"omni: no records of task type \['Perspective'\]; available task "
                                         r"types and sub-types: \[.*'Allocentric'.*'Perspective_Taking'"):
        subset_indices(records, ["Perspective", "Egocentric"], where="omni")


def _parquet(path: Path, rows: list[tuple[str, str | None]]) -> Path:
    """A parquet with verl's ``extra_info`` struct (task_type, sub_task_type) and a prompt column."""
    table = pa.table({"prompt": [f"q{i}" for i in range(len(rows))],
                      "extra_info": [{"index": i, "task_type": t, "sub_task_type": s}
                                     for i, (t, s) in enumerate(rows)]})
    pq.write_table(table, path)
    return path


def test_filter_parquet_keeps_the_rows_of_the_names_and_refuses_what_it_cannot_read(tmp_path: Path):
    rows = [("Perspective_Taking", "Egocentric"), ("Complex_Logic", None), ("Perspective_Taking", "Allocentric"),
            ("Spatial_Interaction", "Manipulation"), ("Complex_Logic", "Geometric")]
    src = _parquet(tmp_path / "train.parquet", rows)
    for names in (["Perspective_Taking"], ["Complex_Logic", "Manipulation"], "Egocentric"):
        wanted = normalise_task_types(names)
        dst = tmp_path / "out" / "subset.parquet"
        n = filter_parquet(src, dst, names)
        kept = pq.read_table(dst).to_pylist()
        expected = [f"q{i}" for i, (t, s) in enumerate(rows) if t in wanted or s in wanted]
        assert [r["prompt"] for r in kept] == expected and n == len(expected)
        assert sorted(p.name for p in dst.parent.iterdir()) == ["subset.parquet"]  # no temporary left
    with pytest.raises(ValueError, match=r"train.parquet: no records of task type \['Nope'\]"):
        filter_parquet(src, tmp_path / "x.parquet", ["Nope"])
    with pytest.raises(ValueError, match="needs at least one task type"):
        filter_parquet(src, tmp_path / "x.parquet", [])
    with pytest.raises(FileNotFoundError, match="missing.parquet"):
        filter_parquet(tmp_path / "missing.parquet", tmp_path / "x.parquet", ["Egocentric"])
    pq.write_table(pa.table({"prompt": ["q"]}), tmp_path / "bare.parquet")
    with pytest.raises(ValueError, match="bare.parquet: no extra_info column"):
        filter_parquet(tmp_path / "bare.parquet", tmp_path / "x.parquet", ["Egocentric"])
    assert not (tmp_path / "x.parquet").exists()
