"""infra/provenance.py: an output's key (settings + input digests), recorded and compared."""
from __future__ import annotations

import hashlib
import json
import os

import pytest

from soft_spatial.infra import provenance as pv


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SOFT_SPATIAL_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_a_key_holds_the_settings_and_every_byte_of_its_inputs(tmp_path):
    data = tmp_path / "data"
    (data / "sub").mkdir(parents=True)
    (data / "a.json").write_bytes(b"[1, 2]")
    (data / "sub" / "img.png").write_bytes(os.urandom(4096))
    (data / ".lock").write_text("ignored")
    table = tmp_path / "t.parquet"
    table.write_bytes(b"PAR1")
    key = pv.make_key({"seed": 0, "steps": (1, 2)}, {"data": data, "table": table})
    assert key["settings"] == {"seed": 0, "steps": [1, 2]}  # the JSON view
    assert key["inputs"]["table"]["sha256"] == hashlib.sha256(b"PAR1").hexdigest()
    # the tree digest, recomputed independently: relative name, size, sha256 of each file
    h = hashlib.sha256()
    for rel in ("a.json", "sub/img.png"):
        body = (data / rel).read_bytes()
        h.update(f"{rel}\0{len(body)}\0{hashlib.sha256(body).hexdigest()}\0".encode())
    assert key["inputs"]["data"]["sha256"] == h.hexdigest()
    # a hidden file does not count; one changed byte of an image does
    (data / ".lock").write_text("other")
    assert pv.make_key({"seed": 0, "steps": (1, 2)}, {"data": data, "table": table}) == key
    body = bytearray((data / "sub" / "img.png").read_bytes())
    body[2000] ^= 1
    (data / "sub" / "img.png").write_bytes(bytes(body))
    assert pv.make_key({"seed": 0, "steps": (1, 2)}, {"data": data, "table": table}) != key


def test_record_then_verdict_same_absent_and_different(tmp_path):
    out = tmp_path / "out" / "stage"
    key = pv.make_key({"seed": 0, "eval": {"temperature": 1.0}})
    stage = pv.Keyed("the stage", out, key)
    assert stage.verdict() is pv.Verdict.ABSENT
    stage.record()
    assert stage.key_path == tmp_path / "out" / "stage.key.json"
    assert stage.verdict() is pv.Verdict.SAME
    other = pv.make_key({"seed": 1, "eval": {"temperature": 0.5}, "new": 3})
    with pytest.raises(pv.OutputKeyMismatch) as err:
        pv.Keyed("the stage", out, other, hint="Use another out=.").verdict()
    text = str(err.value)
    assert "the stage" in text and str(stage.key_path) in text and "Use another out=." in text
    for line in ("settings.seed: 0 -> 1", "settings.eval.temperature: 1.0 -> 0.5",
                 "settings.new: (absent) -> 3"):
        assert line in text
    # differences under redo_on make it again; an output without a key is refused, unless it only
    # follows others
    assert pv.Keyed("the stage", out, other, redo_on=("settings.",)).verdict() is pv.Verdict.REDO
    assert pv.Keyed("the stage", out, other, redo_on=pv.ANY).verdict() is pv.Verdict.REDO
    with pytest.raises(pv.OutputKeyMismatch, match="Use another out="):
        pv.Keyed("the stage", out, other, redo_on=("settings.eval",), hint="Use another out=.").verdict()
    out.mkdir()
    stage.key_path.unlink()
    with pytest.raises(pv.OutputKeyMismatch, match="made before keys"):
        pv.Keyed("the stage", out, key, unkeyed="made before keys").verdict()
    assert pv.Keyed("the stage", out, key, redo_on=pv.ANY).verdict() is pv.Verdict.REDO


def test_record_does_not_rewrite_an_equal_key(tmp_path):
    path = tmp_path / "k.json"
    key = pv.make_key({"a": 1})
    pv.record(path, key)
    before = os.stat(path)
    pv.record(path, key)
    after = os.stat(path)
    assert (before.st_ino, before.st_mtime_ns) == (after.st_ino, after.st_mtime_ns)
    assert json.loads(path.read_text()) == key
    path.write_text(json.dumps({"inputs": {}, "settings": {"a": 1}}))  # another layout, equal
    before = os.stat(path)
    pv.record(path, key)
    assert os.stat(path).st_mtime_ns == before.st_mtime_ns
    pv.record(path, pv.make_key({"a": 2}))
    assert json.loads(path.read_text()) == pv.make_key({"a": 2})


@pytest.mark.parametrize("body", ["{torn", "[1, 2]"])
def test_a_broken_key_file_is_an_error_naming_it(tmp_path, body):
    path = tmp_path / "k.json"
    path.write_text(body)
    with pytest.raises(pv.OutputKeyMismatch, match="k.json(.|\n)*start over"):
        pv.Keyed("x", tmp_path / "x", pv.make_key({}), at=path, hint="start over").verdict()


def test_a_missing_input_is_an_error_naming_it(tmp_path):
    with pytest.raises(FileNotFoundError, match="nowhere"):
        pv.make_key({}, {"data": tmp_path / "nowhere"})


def test_differences_lists_each_leaf():
    assert pv.differences({"a": {"b": 1, "c": 2}}, {"a": {"b": 1, "c": 3}, "d": 4}) == [
        "a.c: 2 -> 3", "d: (absent) -> 4"]
