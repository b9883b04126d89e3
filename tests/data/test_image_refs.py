"""Benchmark files are someone else's: no image path in them leads a read outside the dataset
directory. The path a table writes is checked lexically (``..`` and absolute paths included)
before anything is read, in every layout (OmniSpatial's record ids, SpatiaLab's and MindCube's
image paths, the generic tables' image columns share one resolver, ``data.checks.inside``); a path
that escapes, or holds a NUL byte, is refused naming the file, the record and the field. The
dataset's own links are followed (a Hugging Face hub cache), and what is read is a regular
file."""
from __future__ import annotations

import json
import os
import shutil

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from soft_spatial.data.checks import RecordContext, verified_image
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


def _as_hub_cache(data, repo):
    """``data``'s files moved into ``repo/blobs/<sha256>`` and linked back by relative links from
    ``repo/snapshots/<rev>/``, as the Hugging Face hub lays out a downloaded dataset."""
    import hashlib
    import os
    snapshot = repo / "snapshots" / "0123abcd"
    (repo / "blobs").mkdir(parents=True)
    for path in sorted(p for p in data.rglob("*") if p.is_file()):
        blob = repo / "blobs" / hashlib.sha256(path.read_bytes()).hexdigest()
        if not blob.exists():
            shutil.copy(path, blob)
        link = snapshot / path.relative_to(data)
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    return snapshot


def test_a_hub_cache_layout_is_read_through_its_links(fixtures, tmp_path):
    """Issue 55 item 11: a benchmark laid out as the Hugging Face hub cache was refused at its first
    image (links were resolved before the "inside the dataset" test). The path the table wrote is
    checked lexically, then the dataset's own links are followed; each image is still verified."""
    from soft_spatial.eval.runkey import image_digests
    root, fx = fixtures
    snapshot = _as_hub_cache(fx.omnispatial_test, tmp_path / "datasets--x--omnispatial")
    records = load_omnispatial(snapshot)
    assert [r.key for r in records] == [r.key for r in load_omnispatial(fx.omnispatial_test)]
    image = records[0].images[0]
    assert image.is_symlink() and image.parent.parent == snapshot and image.resolve().parent.name == "blobs"
    names = image_digests(snapshot, records)  # named as the table wrote them, not by their blobs
    assert sorted(names) == sorted(p.relative_to(fx.omnispatial_test).as_posix()
                                   for p in fx.omnispatial_test.rglob("*.png"))


def test_a_path_is_read_as_the_table_wrote_it_and_must_be_a_regular_file(tmp_path):
    base = tmp_path / "data"
    base.mkdir()
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret.png").write_bytes(b"x")
    (base / "real.png").write_bytes(b"x")
    (base / "away").symlink_to(tmp_path / "outside")  # the dataset's own link
    (base / "folder.png").symlink_to(tmp_path / "outside", target_is_directory=True)
    os.mkfifo(base / "pipe.png")
    ctx = RecordContext(base / "t.jsonl", 0, "r0")
    assert resolve_path("real.png", [base], "image", ctx, check=False) == base / "real.png"
    # the ".." is taken off the text, so the file system never climbs out through the link
    assert resolve_path("away/../secret.png", [base], "image", ctx, check=False) == base / "secret.png"
    with pytest.raises(DataFormatError, match="image file not found: away/../secret.png"):
        resolve_path("away/../secret.png", [base], "image", ctx, check=True)
    with pytest.raises(DataFormatError, match=r"leads outside the dataset directory"):
        resolve_path("away/../../outside/secret.png", [base], "image", ctx, check=False)
    for name in ("folder.png", "pipe.png"):  # never opened: a pipe would block the loader
        with pytest.raises(DataFormatError, match=rf"field 'image': image path {base / name} is not a "
                                                  r"regular file; refused"):
            verified_image(base / name, "image", ctx)


@pytest.mark.parametrize("benchmark", ["omnispatial", "spatialab", "mindcube"])
def test_a_nul_byte_in_an_image_path_is_an_error_naming_file_record_and_field(fixtures, tmp_path, benchmark):
    """Issue 55 item 15: a bare ValueError ("embedded null byte") named no table, record or field."""
    root, fx = fixtures
    if benchmark == "omnispatial":
        data = shutil.copytree(fx.omnispatial_test, tmp_path / "o")
        table, rows = data / "data.json", json.loads((data / "data.json").read_text())
        rows[1]["id"] = "1\u0000x_0"
        table.write_text(json.dumps(rows))
        field, load = "id", lambda: load_omnispatial(data)
    else:
        data = shutil.copytree(getattr(fx, benchmark), tmp_path / benchmark)
        table = data / "spatialab.jsonl" if benchmark == "spatialab" else next(data.rglob("*.jsonl"))
        rows = [json.loads(x) for x in table.read_text().splitlines()]
        field = "image" if benchmark == "spatialab" else "images"
        rows[1][field] = "a\u0000.png" if benchmark == "spatialab" else ["a\u0000.png"]
        table.write_text("".join(json.dumps(r) + "\n" for r in rows))
        load = (lambda: load_spatialab(table)) if benchmark == "spatialab" else (lambda: load_mindcube(data))
    with pytest.raises(DataFormatError, match=rf"^{table}, record index 1, id .*, field '{field}': path "
                                              r".* holds a NUL byte"):
        load()


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
