"""The field checks every loader shares (`soft_spatial.data.checks`): answer indexes and letters,
option lists, empty cells, images verified at load, unique ids and no empty benchmark; each
failure a `DataFormatError` naming the file, the record and the field."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from benchmark_checks import assert_names, edit_omni, truncate
from soft_spatial.data import DataFormatError, load_benchmark
from soft_spatial.data.checks import (RecordContext, answer_from_index, answer_from_letter, missing_cell,
                                      option_list, require, text_field)
from soft_spatial.data.fixtures import FixtureSet

CTX = RecordContext(Path("bench.jsonl"), 3, "q3")


def _refused(check, *args, field, **kwargs) -> DataFormatError:
    """The error ``check(*args)`` raises; it names the record of ``CTX`` and ``field``."""
    with pytest.raises(DataFormatError) as info:
        check(*args, **kwargs)
    assert (info.value.file, info.value.index, info.value.record_id, info.value.field) == (
        "bench.jsonl", 3, "q3", field)
    return info.value


def test_answer_indexes_and_letters_address_an_option_or_are_refused():
    # integers, integral floats (CSV and pandas columns) and digit strings; 0- or 1-based
    for value, base, letter in [(0, 0, "A"), (3, 0, "D"), (1, 1, "A"), (4, 1, "D"), (2.0, 0, "C"),
                                (" 2 ", 1, "B")]:
        assert answer_from_index(value, 4, "answer", CTX, base=base) == letter
    for value, base in [(4, 0), (0, 1), (-1, 0), ("-1", 0), (True, 0), (1.5, 0), ("B", 0), (None, 0)]:
        _refused(answer_from_index, value, 4, "answer", CTX, base=base, field="answer")
    assert "out of range for 4 options (1-based)" in str(
        _refused(answer_from_index, 5, 4, "answer", CTX, base=1, field="answer"))
    for value in ("b", "(B)", "Option B", "B."):
        assert answer_from_letter(value, 2, "gt_answer", CTX) == "B"
    for value in ("C", "1", "B or C", "", None):  # C: only two options
        _refused(answer_from_letter, value, 2, "gt_answer", CTX, field="gt_answer")


def test_option_lists_text_fields_and_empty_cells():
    assert option_list([2, 3.5], "options", CTX) == ["2", "3.5"]  # numbers written without quotes
    assert option_list(("a", "b", "c"), "options", CTX, max_n=3) == ["a", "b", "c"]
    for value in (["only"], list("abcde"), ["a", " "], [True, False], "ab", None):
        _refused(option_list, value, "options", CTX, field="options")
    assert require({"q": 0}, "q", CTX) == 0
    _refused(require, {"q": None}, "q", CTX, field="q")
    assert "expected an object, got list" in str(_refused(require, [1], "q", CTX, field=None))
    assert text_field({"q": "Where?"}, "q", CTX) == "Where?"
    for value in ("", "  ", 5):
        _refused(text_field, {"q": value}, "q", CTX, field="q")
    assert [missing_cell(v) for v in (None, math.nan, "", " NaN ", "nan")] == [True] * 5
    assert [missing_cell(v) for v in (0, 0.0, "0", "n/a", "none")] == [False] * 5


def test_corrupt_images_in_mindcube_and_spatialab(fx: FixtureSet):
    first = json.loads((fx.mindcube / "raw" / "MindCube_tinybench.jsonl").read_text().splitlines()[0])
    truncate(fx.mindcube / first["images"][-1])
    with pytest.raises(DataFormatError) as info:
        load_benchmark("mindcube", fx.mindcube)
    assert_names(info.value, fx.mindcube / "raw" / "MindCube_tinybench.jsonl", 0, first["id"], "images")
    rows = pq.read_table(fx.spatialab / "spatialab.parquet").to_pylist()
    rows[2]["image"] = {"bytes": rows[2]["image"]["bytes"][:40], "path": None}
    bad = fx.spatialab / "bad.parquet"
    pq.write_table(pq.read_table(fx.spatialab / "spatialab.parquet").from_pylist(rows), bad)
    with pytest.raises(DataFormatError) as info:
        load_benchmark("spatialab", bad)
    assert_names(info.value, bad, 2, str(rows[2]["id"]), "image")


def test_duplicate_ids_are_an_error_naming_both_records(fx: FixtureSet):
    path = edit_omni(fx, 4, id="1_0", task_type="Perspective_Taking", sub_task_type="Hypothetical")
    with pytest.raises(DataFormatError) as info:
        load_benchmark("omnispatial", fx.omnispatial)
    assert_names(info.value, path, 4, "1_0", "id")
    assert "record index 2" in str(info.value)
    lines = (fx.mindcube / "raw" / "MindCube_tinybench.jsonl").read_text().splitlines()
    (fx.mindcube / "raw" / "MindCube_tinybench.jsonl").write_text("\n".join(lines + [lines[1]]) + "\n")
    with pytest.raises(DataFormatError, match=r"index 6.*duplicate id: record index 1"):
        load_benchmark("mindcube", fx.mindcube)


def test_an_empty_benchmark_is_an_error(fx: FixtureSet):
    (fx.omnispatial_test / "data.json").write_text("[]")
    with pytest.raises(DataFormatError, match="no records"):
        load_benchmark("omnispatial", fx.omnispatial)
    (fx.mindcube / "raw" / "MindCube_tinybench.jsonl").write_text("")
    with pytest.raises(DataFormatError, match="no records"):
        load_benchmark("mindcube", fx.mindcube)
