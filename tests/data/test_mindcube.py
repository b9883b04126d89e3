"""The MindCube loader (`soft_spatial.data.mindcube`) on the synthetic tinybench: views in list
order, inline options, settings from ids, and errors that name the file, the record and the field."""

from __future__ import annotations

import json

import pytest

from benchmark_checks import assert_names, colour
from soft_spatial.data import DataFormatError, load_benchmark
from soft_spatial.data.fixtures import FixtureSet
from soft_spatial.data.mindcube import setting_from_id, split_inline_options


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
    assert [colour(p) for p in four.images] == [fx.colours[p] for p in four.images]
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
    assert_names(info.value, path, 0, None, field)


@pytest.mark.parametrize("written", ["1", "2", "B or A", "BA", "B.A", "the second", "", "(B", "**B**"])
def test_ambiguous_letter_answers_are_refused_naming_the_record(fx: FixtureSet, written):
    # MindCube answers are letters (no index schema): a number is refused, not guessed 0- or 1-based
    path = fx.mindcube / "raw" / "MindCube_tinybench.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    rows[0]["gt_answer"] = written
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(DataFormatError) as info:
        load_benchmark("mindcube", fx.mindcube)
    assert_names(info.value, path, 0, rows[0]["id"], "gt_answer")
    assert repr(written) in str(info.value)
