"""A benchmark text table (JSONL, CSV, TSV, JSON) with a byte that is not UTF-8 is refused naming the
file and the line, never with a bare ``UnicodeDecodeError`` that names neither."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from soft_spatial.data import DataFormatError, load_benchmark
from soft_spatial.data.fixtures import FixtureSet
from soft_spatial.data.tables import read_table


def _latin1(path: Path, text: str) -> int:
    """Rewrite ``text`` (which must occur in ``path``) with an ``é`` in Latin-1 (byte 0xe9, not
    UTF-8) after its first character; returns the 1-based line the byte lands on."""
    data = path.read_bytes()
    at = data.index(text.encode())
    path.write_bytes(data[: at + 1] + "é".encode("latin-1") + data[at + 1:])
    return data.count(b"\n", 0, at) + 1


def _assert_names(err: DataFormatError, path: Path, line: int) -> None:
    message = str(err)
    assert err.file == str(path) and str(path) in message
    assert f"line {line}:" in message and "not UTF-8" in message and "0xe9" in message


def test_a_non_utf8_byte_in_a_mindcube_jsonl_names_the_file_and_line(fx: FixtureSet):
    table = fx.mindcube / "raw" / "MindCube_tinybench.jsonl"
    line = _latin1(table, "around_scene003_q0")
    assert line == 3
    with pytest.raises(DataFormatError) as info:
        load_benchmark("mindcube", fx.mindcube)
    _assert_names(info.value, table, line)


def test_a_non_utf8_byte_in_an_omnispatial_data_json_names_the_file_and_line(fx: FixtureSet):
    table = fx.omnispatial_test / "data.json"
    line = _latin1(table, "Which ball will reach")
    assert line > 1  # data.json is written indented: the line is not always the first
    with pytest.raises(DataFormatError) as info:
        load_benchmark("omnispatial", fx.omnispatial)
    _assert_names(info.value, table, line)


def test_a_non_utf8_byte_in_a_spatialab_csv_names_the_file_and_line(fx: FixtureSet):
    table = fx.spatialab / "spatialab.csv"
    line = _latin1(table, "Which ball is larger?")
    assert line == 6  # header + the fifth record
    with pytest.raises(DataFormatError) as info:
        load_benchmark("spatialab", table)
    _assert_names(info.value, table, line)


@pytest.mark.parametrize("suffix", [".jsonl", ".json", ".csv", ".tsv"])
def test_every_text_table_reader_names_the_line_of_a_non_utf8_byte(tmp_path: Path, suffix: str):
    rows = [{"id": f"r{i}", "text": f"row number {i}"} for i in range(5)]
    path = tmp_path / f"table{suffix}"
    if suffix == ".jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    elif suffix == ".json":
        path.write_text(json.dumps(rows, indent=1), encoding="utf-8")
    else:
        sep = "\t" if suffix == ".tsv" else ","
        path.write_text("id" + sep + "text\n" + "".join(f"{r['id']}{sep}{r['text']}\n" for r in rows),
                        encoding="utf-8")
    assert read_table(path)[3]["id"] == "r3"
    line = _latin1(path, "row number 3")
    with pytest.raises(DataFormatError) as info:
        read_table(path)
    _assert_names(info.value, path, line)
    assert isinstance(info.value.__cause__, UnicodeDecodeError)
