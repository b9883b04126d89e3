"""The SpatiaLab loader (`soft_spatial.data.spatialab`) on the synthetic tables (JSONL, parquet with
embedded images, CSV with option columns): column mappings, answer readings, categories, and
errors that name the file, the record and the field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from PIL import Image

from benchmark_checks import assert_names, colour
from soft_spatial.data import DataFormatError, QuestionRecord, SkippedRecord, SpatialabColumns, load_benchmark
from soft_spatial.data.fixtures import FixtureSet
from soft_spatial.data.spatialab import CATEGORIES, canonical_category


def _check_spatialab(records: list[QuestionRecord], fx: FixtureSet) -> None:
    assert [r.category for r in records] == list(CATEGORIES)
    assert [r.answer for r in records] == ["A", "B", "C", "D", "A", "B"]
    assert all(len(r.options) == 4 and len(r.images) == 1 for r in records)
    assert records[3].options == ["a cup", "a fork", "a plate", "a knife"]
    assert records[1].subcategory == "layer order"
    expected = fx.colours[fx.spatialab / "images" / "2.png"]
    assert colour(records[2].images[0]) == expected


def test_spatialab_jsonl_list_options_letter_answers(fx: FixtureSet):
    records = load_benchmark("spatialab", fx.spatialab / "spatialab.jsonl")
    _check_spatialab(records, fx)
    assert records[0].images == [fx.spatialab / "images" / "0.png"]


def test_spatialab_parquet_embedded_bytes(fx: FixtureSet):
    records = load_benchmark("spatialab", fx.spatialab / "spatialab.parquet")
    _check_spatialab(records, fx)
    assert isinstance(records[0].images[0], Image.Image)


def test_spatialab_csv_option_columns_one_based(fx: FixtureSet):
    records = load_benchmark("spatialab", fx.spatialab / "spatialab.csv")  # 1-based numbers: the default
    _check_spatialab(records, fx)
    with pytest.raises(DataFormatError) as info:  # integer answers can be refused
        load_benchmark("spatialab", fx.spatialab / "spatialab.csv", columns=SpatialabColumns(answer_index_base=None))
    assert_names(info.value, fx.spatialab / "spatialab.csv", 0, "sl_0", "answer")
    assert "answer_index_base" in str(info.value)


def test_spatialab_custom_mapping_zero_based_and_text_answers(tmp_path: Path):
    rows = [
        {"qid": 7, "prompt": "Which is nearer?", "choices": ["cup", "pot"], "label": 0, "cat": "depth_and_occlusion",
         "img": "x.png"},
        {"qid": 8, "prompt": "Which is taller?", "choices": ["cup", "pot"], "label": "pot", "cat": "SIZE-SCALE",
         "img": "x.png"},
    ]
    Image.new("RGB", (8, 8), (1, 2, 3)).save(tmp_path / "x.png")
    (tmp_path / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    cols = SpatialabColumns(id="qid", question="prompt", options="choices", answer="label", answer_index_base=0,
                            category="cat", subcategory=None, image="img")
    records = load_benchmark("spatialab", tmp_path, columns=cols)  # the directory's only table
    assert [(r.id, r.answer, r.category, r.subcategory) for r in records] == [
        ("7", "A", "Depth & Occlusion", None),
        ("8", "B", "Size & Scale", None),
    ]


def _counting_rows(path: Path, rows: list[dict]) -> Path:
    """The fixture's JSONL with ``rows`` (counting questions: numeric options) appended."""
    lines = path.read_text().splitlines()
    base = {"question": "How many chairs?", "category": "3D Geometry", "subcategory": "counting",
            "image": "images/0.png"}
    lines += [json.dumps({**base, **row}) for row in rows]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_spatialab_numeric_answer_read_two_ways_is_left_out_naming_both_readings(fx: FixtureSet):
    path = _counting_rows(fx.spatialab / "spatialab.jsonl", [
        {"id": "count_3", "options": ["2", "3", "4", "5"], "answer": "3"},  # number 3 is "4"; text "3" is B
        {"id": "count_int", "options": ["2", "3", "4", "5"], "answer": 2},  # number 2 is "3"; text "2" is A
        {"id": "count_same", "options": ["1", "2", "3", "4"], "answer": "2"},  # both readings: B
        {"id": "count_5", "options": ["2", "3", "4", "5"], "answer": "5"},  # no option number 5: the text, D
        {"id": "letter_text", "options": ["B", "A"], "answer": "A"},  # letter A is "B", text "A" is B
    ])
    with pytest.warns(SkippedRecord) as caught:
        records = load_benchmark("spatialab", path)
    assert [r.id for r in records[6:]] == ["count_same", "count_5"]
    assert [(r.answer, r.answer_text) for r in records[6:]] == [("B", "2"), ("D", "5")]
    _check_spatialab(records[:6], fx)  # every other record as before
    messages = [str(w.message) for w in caught]
    assert len(messages) == 3
    assert [(w.message.index, w.message.record_id, w.message.field) for w in caught] == [
        (6, "count_3", "answer"), (7, "count_int", "answer"), (10, "letter_text", "answer")]
    assert str(path) in messages[0] and "record index 6, id 'count_3'" in messages[0]
    assert ("the answer '3' read as an option number (1-based) is option C ('4'), read as an option's "
            "text option B") in messages[0]
    assert "read as an option letter is option A ('B'), read as an option's text option B" in messages[2]
    # a release whose schema is known says which reading it uses
    by_index = load_benchmark("spatialab", path, columns=SpatialabColumns(ambiguous_answer="index"))
    by_text = load_benchmark("spatialab", path, columns=SpatialabColumns(ambiguous_answer="text"))
    assert [r.answer_text for r in by_index[6:]] == ["4", "3", "2", "5", "B"]
    assert [r.answer_text for r in by_text[6:]] == ["3", "2", "2", "5", "A"]
    with pytest.raises(ValueError, match="ambiguous_answer must be one of skip, index, text"):
        load_benchmark("spatialab", path, columns=SpatialabColumns(ambiguous_answer="guess"))


def test_a_spatialab_table_whose_every_answer_is_ambiguous_is_refused(tmp_path: Path):
    Image.new("RGB", (8, 8)).save(tmp_path / "x.png")
    row = {"id": "c", "question": "How many?", "options": ["2", "3", "4", "5"], "answer": "3",
           "category": "3D Geometry", "image": "x.png"}
    (tmp_path / "t.jsonl").write_text(json.dumps(row) + "\n")
    with pytest.warns(SkippedRecord), pytest.raises(DataFormatError, match="no records"):
        load_benchmark("spatialab", tmp_path / "t.jsonl")


def test_spatialab_category_names():
    assert canonical_category("Depth & Occlusion") == "Depth & Occlusion"
    assert canonical_category("3d_geometry") == "3D Geometry"
    assert canonical_category("Relative positioning") == "Relative Positioning"
    assert canonical_category("Colour") is None


def test_spatialab_directory_with_several_tables(fx: FixtureSet):
    with pytest.raises(FileNotFoundError, match="spatialab.csv"):  # three tables: which one?
        load_benchmark("spatialab", fx.spatialab)


@pytest.mark.parametrize(
    "index, changes, field",
    [
        (2, {"answer": "E"}, "answer"),
        (3, {"answer": "a fork and a knife"}, "answer"),
        (1, {"options": ["only one"]}, "options"),
        (4, {"category": "Colour"}, "category"),
        (5, {"image": "images/missing.png"}, "image"),
        (0, {"image": None}, "image"),
    ],
)
def test_spatialab_bad_field(fx: FixtureSet, index, changes, field):
    path = fx.spatialab / "spatialab.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    rows[index].update(changes)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(DataFormatError) as info:
        load_benchmark("spatialab", path)
    assert_names(info.value, path, index, f"sl_{index}", field)


def test_spatialab_lenient_switches(fx: FixtureSet):
    path = fx.spatialab / "spatialab.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    rows[4]["category"] = "Colour"
    rows[5]["image"] = "images/missing.png"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    records = load_benchmark("spatialab", path, strict_categories=False, check_images=False)
    assert records[4].category == "Colour" and records[5].images == [fx.spatialab / "images" / "missing.png"]
