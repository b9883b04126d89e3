"""The data layer's error and warning (`soft_spatial.data.errors`): the message names the file, the
record (position and id, each when known) and the field, in one fixed form, and the parts stay
readable as attributes; a record left out carries its reason's parts."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from soft_spatial.data import DataFormatError, SkippedRecord


@pytest.mark.parametrize("where, expected", [
    ({}, "/d/b.jsonl: bad"),
    ({"index": 0}, "/d/b.jsonl, record index 0: bad"),
    ({"record_id": "q1"}, "/d/b.jsonl, record id 'q1': bad"),
    ({"field": "answer"}, "/d/b.jsonl, field 'answer': bad"),
    ({"index": 7, "record_id": "q1", "field": "answer"}, "/d/b.jsonl, record index 7, id 'q1', field 'answer': bad"),
])
def test_the_message_names_each_known_part_in_one_form(where, expected):
    err = DataFormatError(Path("/d/b.jsonl"), "bad", **where)
    assert str(err) == expected and isinstance(err, ValueError)
    assert (err.file, err.index, err.record_id, err.field) == (
        "/d/b.jsonl", where.get("index"), where.get("record_id"), where.get("field"))


def test_a_record_left_out_is_a_warning_carrying_its_reason():
    reason = DataFormatError("t.jsonl", "read two ways", index=6, record_id="count_3", field="answer")
    with pytest.warns(SkippedRecord) as caught:
        warnings.warn(SkippedRecord(reason))
    (w,) = caught
    assert str(w.message) == "record left out: t.jsonl, record index 6, id 'count_3', field 'answer': read two ways"
    assert (w.message.file, w.message.index, w.message.record_id, w.message.field) == (
        "t.jsonl", 6, "count_3", "answer")
