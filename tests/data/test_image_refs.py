"""Benchmark files are someone else's: no image path in them leads a read outside the dataset
directory. ``..``, absolute paths and symlinks are resolved before anything is read, in every
layout (OmniSpatial's record ids, SpatiaLab's and MindCube's image paths, the generic tables'
image columns share one resolver, ``data.checks.inside``), and a path that escapes is refused
naming the file, the record and the field."""
from __future__ import annotations

import json
import shutil

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from soft_spatial.data.checks import RecordContext
from soft_spatial.data.errors import DataFormatError
from soft_spatial.data.fixtures import write_fixtures
from soft_spatial.data.image_refs import resolve_path
from soft_spatial.data.mindcube import load_mindcube
from soft_spatial.data.omnispatial import load_omnispatial
from soft_spatial.data.spatialab import load_spatialab


@pytest.fixture(scope="module")
def fixtures(tmp_path_factory):
    root = tmp_path_factory.mktemp("paths")
    return root, write_fixtures(root / "fx")


def _copy(fixtures, tmp_path, name):
    root, fx = fixtures
    shutil.copytree(getattr(fx, name), tmp_path / name)
    secret = tmp_path / "outside" / "secret.png"
    secret.parent.mkdir()
    shutil.copy(next(getattr(fx, name).rglob("*.png")), secret)
    return tmp_path / name, secret


def test_an_omnispatial_id_that_climbs_out_is_refused(fixtures, tmp_path):
    data, secret = _copy(fixtures, tmp_path, "omnispatial_test")
    records = json.loads((data / "data.json").read_text())
    depth = len((data / records[0]["task_type"]).relative_to(tmp_path).parts)
    records[0]["id"] = "/".join([".."] * depth) + "/outside/secret_0"
    (data / "data.json").write_text(json.dumps(records))
    with pytest.raises(DataFormatError, match="field 'id': path .* leads outside the dataset "
                                              "directory") as e:
        load_omnispatial(data, check_images=False)
    assert "data.json" in str(e.value) and "record index 0" in str(e.value)


@pytest.mark.parametrize("kind", ["relative", "absolute"])
def test_a_spatialab_image_path_outside_is_refused(fixtures, tmp_path, kind):
    data, secret = _copy(fixtures, tmp_path, "spatialab")
    rows = [json.loads(x) for x in (data / "spatialab.jsonl").read_text().splitlines()]
    rows[1]["image"] = "../outside/secret.png" if kind == "relative" else str(secret)
    (data / "spatialab.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(DataFormatError, match="leads outside the dataset directory") as e:
        load_spatialab(data / "spatialab.jsonl")
    assert "sl_1" in str(e.value) and "spatialab.jsonl" in str(e.value)


def test_a_mindcube_view_outside_is_refused(fixtures, tmp_path):
    data, secret = _copy(fixtures, tmp_path, "mindcube")
    path = next(data.rglob("*.jsonl"))
    rows = [json.loads(x) for x in path.read_text().splitlines()]
    rows[0]["images"] = ["../../outside/secret.png"]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(DataFormatError, match="leads outside the dataset directory") as e:
        load_mindcube(data)
    assert rows[0]["id"] in str(e.value)


def test_a_symlink_that_points_out_is_refused(tmp_path):
    base = tmp_path / "data"
    base.mkdir()
    (tmp_path / "secret.png").write_bytes(b"x")
    (base / "link.png").symlink_to(tmp_path / "secret.png")
    (base / "real.png").write_bytes(b"x")
    ctx = RecordContext(base / "t.jsonl", 0, "r0")
    with pytest.raises(DataFormatError, match="leads outside"):
        resolve_path("link.png", [base], "image", ctx, check=False)
    assert resolve_path("real.png", [base], "image", ctx, check=False) == base / "real.png"


SEGMENTS = st.sampled_from(["..", ".", "img", "sub", "a.png", "secret.png", ""])


@settings(max_examples=300, deadline=None)
@given(parts=st.lists(SEGMENTS, min_size=1, max_size=6), absolute=st.booleans())
def test_no_resolved_image_path_leaves_its_base(tmp_path_factory, parts, absolute):
    """Any path a record can hold resolves inside a base, or is refused naming the field."""
    root = tmp_path_factory.mktemp("hostile")
    base = root / "data"
    (base / "img" / "sub").mkdir(parents=True)
    (root / "secret.png").write_bytes(b"x")
    text = "/".join(parts) or "."
    if absolute:
        text = str(root) + "/" + text
    ctx = RecordContext(base / "t.jsonl", 3, "r3")
    try:
        got = resolve_path(text, [base, base / "img"], "image", ctx, check=False)
    except DataFormatError as e:
        assert "field 'image'" in str(e) and "id 'r3'" in str(e), str(e)
        return
    assert got.resolve().is_relative_to(base.resolve()), (text, got)
