"""The OmniSpatial loader (`soft_spatial.data.omnispatial`) on the synthetic release: both splits,
the taxonomy, and errors that name the file, the record and the field."""

from __future__ import annotations

import json

import pytest

from benchmark_checks import assert_names, edit_omni, truncate
from soft_spatial.data import DataFormatError, load_benchmark
from soft_spatial.data.fixtures import FixtureSet
from soft_spatial.data.omnispatial import TAXONOMY


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
    path = edit_omni(fx, 3, **changes)
    with pytest.raises(DataFormatError) as info:
        load_benchmark("omnispatial", fx.omnispatial)
    assert_names(info.value, path, 3, "2_0", field)


def test_omnispatial_missing_image(fx: FixtureSet):
    (fx.omnispatial_test / "Complex_Logic" / "8.png").unlink()
    with pytest.raises(DataFormatError) as info:
        load_benchmark("omnispatial", fx.omnispatial)
    assert_names(info.value, fx.omnispatial_test / "data.json", 9, "8_0", "image")
    assert "Complex_Logic/8.png" in str(info.value)
    assert len(load_benchmark("omnispatial", fx.omnispatial, check_images=False)) == 10


def test_omnispatial_missing_field_and_bad_json(fx: FixtureSet):
    path = fx.omnispatial_test / "data.json"
    data = json.loads(path.read_text())
    del data[5]["options"]
    path.write_text(json.dumps(data))
    with pytest.raises(DataFormatError) as info:
        load_benchmark("omnispatial", fx.omnispatial)
    assert_names(info.value, path, 5, "4_0", "options")
    path.write_text("{not json")
    with pytest.raises(DataFormatError, match="invalid JSON"):
        load_benchmark("omnispatial", fx.omnispatial)


def test_omnispatial_ids_repeat_across_task_types(fx: FixtureSet):
    # ids number the images of one task type, so "2_0" may exist in two task types
    edit_omni(fx, 9, id="2_0")
    (fx.omnispatial_test / "Complex_Logic" / "2.png").write_bytes(
        (fx.omnispatial_test / "Complex_Logic" / "8.png").read_bytes())
    records = load_benchmark("omnispatial", fx.omnispatial)
    assert [r.key for r in records if r.id == "2_0"] == ["Dynamic_Reasoning/2_0", "Complex_Logic/2_0"]


@pytest.mark.parametrize("keep", [40, -20])  # no header left / the last chunks cut off
def test_corrupt_image_is_named_with_its_record(fx: FixtureSet, keep):
    image = fx.omnispatial_test / "Complex_Logic" / "8.png"
    truncate(image, keep if keep > 0 else image.stat().st_size + keep)
    with pytest.raises(DataFormatError) as info:
        load_benchmark("omnispatial", fx.omnispatial)
    assert_names(info.value, fx.omnispatial_test / "data.json", 9, "8_0", "image")
    assert "not a readable image" in str(info.value) and str(image) in str(info.value)
