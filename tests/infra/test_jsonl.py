"""soft_spatial.infra.jsonl: the one JSONL reader."""
import json

import pytest

from soft_spatial.infra.jsonl import JSONLError, read_jsonl


def test_records_blank_lines_and_line_separators_inside_records(tmp_path):
    rows = [{"a": 1}, {"text": "one\u2028two\u2029three\x1cfour\rfive"}, [1, 2]]
    path = tmp_path / "x.jsonl"
    path.write_text(json.dumps(rows[0]) + "\n\n" + "".join(
        json.dumps(r, ensure_ascii=False) + "\n" for r in rows[1:]), encoding="utf-8")
    assert read_jsonl(path) == rows


def test_bad_line_names_file_and_line_torn_tail_dropped_on_request(tmp_path):
    path = tmp_path / "x.jsonl"
    path.write_text('{"a": 1}\n{"a": 2}\n{"a": ', encoding="utf-8")
    with pytest.raises(JSONLError, match=r"x.jsonl: line 3: invalid JSON") as err:
        read_jsonl(path)
    assert err.value.line == 3
    assert read_jsonl(path, drop_torn_tail=True) == [{"a": 1}, {"a": 2}]
    path.write_text('{"a": 1}\nnope\n{"a": 3}\n', encoding="utf-8")
    with pytest.raises(JSONLError, match="line 2"):  # not the last line: an error either way
        read_jsonl(path, drop_torn_tail=True)
