"""Benchmark loaders on the synthetic fixtures: schema, order, and errors that name the spot."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from PIL import Image

from soft_spatial.data import (
    DataFormatError,
    QuestionRecord,
    SkippedRecord,
    SpatialabColumns,
    index_to_letter,
    letter_to_index,
    load_benchmark,
    option_letters,
)
from soft_spatial.data.fixtures import FixtureSet, write_fixtures
from soft_spatial.data.mindcube import setting_from_id, split_inline_options
from soft_spatial.data.omnispatial import TAXONOMY
from soft_spatial.data.spatialab import CATEGORIES, canonical_category


@pytest.fixture()
def fx(tmp_path: Path) -> FixtureSet:
    return write_fixtures(tmp_path / "fixtures")


def _colour(image) -> tuple[int, int, int]:
    img = image if isinstance(image, Image.Image) else Image.open(image)
    return img.convert("RGB").getpixel((0, 0))


def _assert_names(err: DataFormatError, file: Path, index: int, record_id: str | None, field: str) -> None:
    message = str(err)
    assert str(file) in message
    assert f"index {index}" in message
    if record_id is not None:
        assert f"id {record_id!r}" in message
    assert f"field {field!r}" in message
    assert (err.index, err.field) == (index, field)


# --- record helpers -------------------------------------------------------------------------------


def test_letter_helpers():
    assert option_letters(3) == ["A", "B", "C"]
    assert letter_to_index("c") == 2 and index_to_letter(3) == "D"
    rec = QuestionRecord("q", [], "Q?", ["x", "y", "z"], "B", "omnispatial", "Complex_Logic")
    assert rec.letters == ["A", "B", "C"]
    assert rec.answer_index == 1 and rec.answer_text == "y"
    assert rec.option_text("c") == "z"
    with pytest.raises(KeyError):
        rec.option_text("D")
    with pytest.raises(ValueError):
        letter_to_index("AB")


# --- OmniSpatial --------------------------------------------------------------------------------


def test_omnispatial_test_split(fx: FixtureSet):
    records = load_benchmark("omnispatial", fx.omnispatial)  # parent dir + default split "test"
    assert len(records) == 10
    assert {r.category for r in records} == set(TAXONOMY)
    assert {r.subcategory for r in records} == {s for subs in TAXONOMY.values() for s in subs}
    assert {r.answer for r in records} == {"A", "B", "C", "D"}
    assert {len(r.options) for r in records} == {2, 3, 4}
    by_id = {r.id: r for r in records}
    assert by_id["0_0"].images == by_id["0_1"].images == [fx.omnispatial_test / "Perspective_Taking" / "0.png"]
    assert by_id["0_0"].answer == "B" and by_id["0_0"].answer_text == "right"
    assert by_id["8_0"].options == ["1", "2", "3", "4"]
    assert all(r.benchmark == "omnispatial" and len(r.images) == 1 and not r.options_inline for r in records)
    assert by_id["0_1"].task_type == "Perspective_Taking" and by_id["0_1"].sub_task_type == "Allocentric"


def test_omnispatial_train_split_and_release_root(fx: FixtureSet):
    train = load_benchmark("omnispatial", fx.omnispatial, split="train")
    assert [r.id for r in train] == ["0_0", "0_1", "1_0", "2_0"]
    # the release directory itself is accepted too, whatever the split argument
    direct = load_benchmark("omnispatial", fx.omnispatial_train, split="train")
    assert [r.question for r in direct] == [r.question for r in train]
    with pytest.raises(FileNotFoundError, match="full"):
        load_benchmark("omnispatial", fx.omnispatial, split="full")


def _edit_omni(fx: FixtureSet, index: int, **changes) -> Path:
    path = fx.omnispatial_test / "data.json"
    data = json.loads(path.read_text())
    data[index].update(changes)
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize(
    "changes, field",
    [
        ({"answer": 4}, "answer"),
        ({"answer": -1}, "answer"),
        ({"answer": "B"}, "answer"),
        ({"task_type": "Spatial_Logic"}, "task_type"),
        ({"sub_task_type": "Egocentric"}, "sub_task_type"),  # valid name, wrong task type
        ({"options": ["only one"]}, "options"),
        ({"options": ["a", "b", "c", "d", "e"]}, "options"),
        ({"question": ""}, "question"),
    ],
)
def test_omnispatial_bad_field(fx: FixtureSet, changes, field):
    path = _edit_omni(fx, 3, **changes)
    with pytest.raises(DataFormatError) as info:
        load_benchmark("omnispatial", fx.omnispatial)
    _assert_names(info.value, path, 3, "2_0", field)


def test_omnispatial_missing_image(fx: FixtureSet):
    (fx.omnispatial_test / "Complex_Logic" / "8.png").unlink()
    with pytest.raises(DataFormatError) as info:
        load_benchmark("omnispatial", fx.omnispatial)
    _assert_names(info.value, fx.omnispatial_test / "data.json", 9, "8_0", "image")
    assert "Complex_Logic/8.png" in str(info.value)
    assert len(load_benchmark("omnispatial", fx.omnispatial, check_images=False)) == 10


def test_omnispatial_missing_field_and_bad_json(fx: FixtureSet):
    path = fx.omnispatial_test / "data.json"
    data = json.loads(path.read_text())
    del data[5]["options"]
    path.write_text(json.dumps(data))
    with pytest.raises(DataFormatError) as info:
        load_benchmark("omnispatial", fx.omnispatial)
    _assert_names(info.value, path, 5, "4_0", "options")
    path.write_text("{not json")
    with pytest.raises(DataFormatError, match="invalid JSON"):
        load_benchmark("omnispatial", fx.omnispatial)


# --- SpatiaLab ----------------------------------------------------------------------------------


def _check_spatialab(records: list[QuestionRecord], fx: FixtureSet) -> None:
    assert [r.category for r in records] == list(CATEGORIES)
    assert [r.answer for r in records] == ["A", "B", "C", "D", "A", "B"]
    assert all(len(r.options) == 4 and len(r.images) == 1 for r in records)
    assert records[3].options == ["a cup", "a fork", "a plate", "a knife"]
    assert records[1].subcategory == "layer order"
    expected = fx.colours[fx.spatialab / "images" / "2.png"]
    assert _colour(records[2].images[0]) == expected


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
    _assert_names(info.value, fx.spatialab / "spatialab.csv", 0, "sl_0", "answer")
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
    _assert_names(info.value, path, index, f"sl_{index}", field)


def test_spatialab_lenient_switches(fx: FixtureSet):
    path = fx.spatialab / "spatialab.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    rows[4]["category"] = "Colour"
    rows[5]["image"] = "images/missing.png"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    records = load_benchmark("spatialab", path, strict_categories=False, check_images=False)
    assert records[4].category == "Colour" and records[5].images == [fx.spatialab / "images" / "missing.png"]


# --- MindCube -----------------------------------------------------------------------------------


def test_mindcube_records(fx: FixtureSet):
    records = load_benchmark("mindcube", fx.mindcube)
    assert [r.category for r in records] == ["among", "among", "around", "around", "rotation", "translation"]
    assert [len(r.images) for r in records] == [2, 4, 3, 3, 4, 2]
    assert [len(r.options) for r in records] == [2, 4, 3, 3, 4, 2]
    assert [r.answer for r in records] == ["B", "C", "A", "C", "D", "A"]
    first = records[0]
    assert first.options == ["Directly left", "Diagonally forward and right"]
    assert first.question.endswith("A. Directly left B. Diagonally forward and right")  # kept verbatim
    assert first.options_inline and first.subcategory is None
    assert first.meta == {"category": ["perpendicular", "self"], "type": "two_view", "meta_info": [["object"], [None]]}
    # view order is the list order, not the sorted file names
    four = records[1]
    assert [p.name for p in four.images] == ["front.png", "left.png", "back.png", "right.png"]
    assert [_colour(p) for p in four.images] == [fx.colours[p] for p in four.images]
    # the JSONL file itself is accepted as root (images relative to data/)
    again = load_benchmark("mindcube", fx.mindcube / "raw" / "MindCube_tinybench.jsonl")
    assert [r.images for r in again] == [r.images for r in records]


def test_mindcube_settings_and_inline_options():
    assert setting_from_id("aroundnew_x_q0") == "around"
    assert setting_from_id("translation_1") == "translation"
    assert setting_from_id("other_1") is None
    stem, options = split_inline_options("Where is view A. relative to me? A. left\nB. right C. behind")
    assert stem == "Where is view A. relative to me?"
    assert options == ["left", "right", "behind"]
    assert split_inline_options("No options here.") == ("No options here.", [])


@pytest.mark.parametrize(
    "changes, field",
    [
        ({"gt_answer": "D"}, "gt_answer"),  # only two options
        ({"id": "sideways_group001"}, "id"),
        ({"question": "Which way did I move?"}, "question"),
        ({"images": []}, "images"),
        ({"images": ["other_all_image/among/group001/nope.png", "other_all_image/among/group001/left.png"]}, "images"),
    ],
)
def test_mindcube_bad_field(fx: FixtureSet, changes, field):
    path = fx.mindcube / "raw" / "MindCube_tinybench.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    rows[0].update(changes)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(DataFormatError) as info:
        load_benchmark("mindcube", fx.mindcube)
    _assert_names(info.value, path, 0, None, field)


# --- gold answers: normalise what is unambiguous, refuse the rest naming the record ----------------


@pytest.mark.parametrize("written", ["B", " b ", "B.", "(B)", "B)", "[b]", "Option B", "option: b", "Ｂ"])
def test_letter_answers_in_any_unambiguous_form(fx: FixtureSet, written):
    for path, field, loader in ((fx.mindcube / "raw" / "MindCube_tinybench.jsonl", "gt_answer", "mindcube"),
                                (fx.spatialab / "spatialab.jsonl", "answer", "spatialab")):
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        rows[0][field] = written
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        assert load_benchmark(loader, path.parent.parent if loader == "mindcube" else path)[0].answer == "B"


@pytest.mark.parametrize("written", ["1", "2", "B or A", "BA", "B.A", "the second", "", "(B", "**B**"])
def test_ambiguous_letter_answers_are_refused_naming_the_record(fx: FixtureSet, written):
    # MindCube answers are letters (no index schema): a number is refused, not guessed 0- or 1-based
    path = fx.mindcube / "raw" / "MindCube_tinybench.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    rows[0]["gt_answer"] = written
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(DataFormatError) as info:
        load_benchmark("mindcube", fx.mindcube)
    _assert_names(info.value, path, 0, rows[0]["id"], "gt_answer")
    assert repr(written) in str(info.value)


def test_a_record_refuses_an_answer_that_is_not_one_of_its_letters():
    for answer in ("A.", "(A)", "1", "a", "D", None):
        with pytest.raises(ValueError, match=re.escape(f"record 'q': answer {answer!r} is not one of")):
            QuestionRecord("q", [], "Q?", ["x", "y", "z"], answer, "omnispatial", "Complex_Logic")
    assert QuestionRecord("q", [], "Q?", ["x", "y", "z"], "C", "omnispatial", "Complex_Logic").answer_text == "z"


def test_load_benchmark_unknown_name(fx: FixtureSet):
    with pytest.raises(ValueError, match="unknown benchmark"):
        load_benchmark("vsibench", fx.root)
    with pytest.raises(ValueError, match="unknown MindCube split"):
        load_benchmark("mindcube", fx.mindcube, split="dev")


def test_spatialab_parquet_fixture_is_hf_image_struct(fx: FixtureSet):
    column = pq.read_table(fx.spatialab / "spatialab.parquet").column("image").to_pylist()
    assert set(column[0]) == {"bytes", "path"}


# --- images verified at load, unique ids, no empty benchmark -----------------------------------


def _truncate(path: Path, keep: int = 40) -> None:
    path.write_bytes(path.read_bytes()[:keep])


@pytest.mark.parametrize("keep", [40, -20])  # no header left / the last chunks cut off
def test_corrupt_image_is_named_with_its_record(fx: FixtureSet, keep):
    image = fx.omnispatial_test / "Complex_Logic" / "8.png"
    _truncate(image, keep if keep > 0 else image.stat().st_size + keep)
    with pytest.raises(DataFormatError) as info:
        load_benchmark("omnispatial", fx.omnispatial)
    _assert_names(info.value, fx.omnispatial_test / "data.json", 9, "8_0", "image")
    assert "not a readable image" in str(info.value) and str(image) in str(info.value)


def test_corrupt_images_in_mindcube_and_spatialab(fx: FixtureSet):
    first = json.loads((fx.mindcube / "raw" / "MindCube_tinybench.jsonl").read_text().splitlines()[0])
    _truncate(fx.mindcube / first["images"][-1])
    with pytest.raises(DataFormatError) as info:
        load_benchmark("mindcube", fx.mindcube)
    _assert_names(info.value, fx.mindcube / "raw" / "MindCube_tinybench.jsonl", 0, first["id"], "images")
    rows = pq.read_table(fx.spatialab / "spatialab.parquet").to_pylist()
    rows[2]["image"] = {"bytes": rows[2]["image"]["bytes"][:40], "path": None}
    bad = fx.spatialab / "bad.parquet"
    pq.write_table(pq.read_table(fx.spatialab / "spatialab.parquet").from_pylist(rows), bad)
    with pytest.raises(DataFormatError) as info:
        load_benchmark("spatialab", bad)
    _assert_names(info.value, bad, 2, str(rows[2]["id"]), "image")


def test_duplicate_ids_are_an_error_naming_both_records(fx: FixtureSet):
    path = _edit_omni(fx, 4, id="1_0", task_type="Perspective_Taking", sub_task_type="Hypothetical")
    with pytest.raises(DataFormatError) as info:
        load_benchmark("omnispatial", fx.omnispatial)
    _assert_names(info.value, path, 4, "1_0", "id")
    assert "record index 2" in str(info.value)
    lines = (fx.mindcube / "raw" / "MindCube_tinybench.jsonl").read_text().splitlines()
    (fx.mindcube / "raw" / "MindCube_tinybench.jsonl").write_text("\n".join(lines + [lines[1]]) + "\n")
    with pytest.raises(DataFormatError, match=r"index 6.*duplicate id: record index 1"):
        load_benchmark("mindcube", fx.mindcube)


def test_omnispatial_ids_repeat_across_task_types(fx: FixtureSet):
    # ids number the images of one task type, so "2_0" may exist in two task types
    _edit_omni(fx, 9, id="2_0")
    (fx.omnispatial_test / "Complex_Logic" / "2.png").write_bytes(
        (fx.omnispatial_test / "Complex_Logic" / "8.png").read_bytes())
    records = load_benchmark("omnispatial", fx.omnispatial)
    assert [r.key for r in records if r.id == "2_0"] == ["Dynamic_Reasoning/2_0", "Complex_Logic/2_0"]


def test_an_empty_benchmark_is_an_error(fx: FixtureSet):
    (fx.omnispatial_test / "data.json").write_text("[]")
    with pytest.raises(DataFormatError, match="no records"):
        load_benchmark("omnispatial", fx.omnispatial)
    (fx.mindcube / "raw" / "MindCube_tinybench.jsonl").write_text("")
    with pytest.raises(DataFormatError, match="no records"):
        load_benchmark("mindcube", fx.mindcube)
