"""The evaluation's run key (`soft_spatial.eval.runkey`): results are resumed only into a directory
whose key (settings, and the digest of every byte of model, data and images) is this run's; any
difference is refused naming it, and a refusal changes nothing."""
import hashlib
import json
import os
import re
import shutil
import struct

import pytest

from eval_helpers import NoEngine, small, tree
from soft_spatial.eval import evaluate
from soft_spatial.eval import runkey
from soft_spatial.eval.runkey import RunKeyMismatch, weights_fingerprint


def overwrite_in_place(path, offset, data):
    """Overwrite bytes of ``path`` at ``offset``, then put its mtime back (its size is unchanged):
    only the content and the ctime differ afterwards."""
    st = os.stat(path)
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(data)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    after = os.stat(path)
    assert (after.st_size, after.st_mtime_ns, after.st_ino) == (st.st_size, st.st_mtime_ns, st.st_ino)


def zero_middle_tensor(path):
    """Zero the safetensors tensor that holds the middle byte of ``path``; returns its name."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
    middle = os.path.getsize(path) // 2 - 8 - n
    name, info = next((k, v) for k, v in header.items() if k != "__metadata__"
                      and v["data_offsets"][0] <= middle < v["data_offsets"][1])
    a, b = info["data_offsets"]
    overwrite_in_place(path, 8 + n + a, bytes(b - a))
    return name


@pytest.fixture(scope="module")
def tiny_7mb(tmp_path_factory):
    """A tiny Qwen3-VL whose model.safetensors is about 7 MB (wide MLPs): bytes in its middle are
    neither in the first nor in the last MiB."""
    from soft_spatial.models import build_tiny_model
    return build_tiny_model(tmp_path_factory.mktemp("tiny_7mb"), family="qwen3_vl", vocab="small",
                            intermediate_size=4096)


@pytest.fixture
def private_cache(tmp_path, monkeypatch):
    """A digest cache of this test's own (``$SOFT_SPATIAL_CACHE``)."""
    monkeypatch.setenv("SOFT_SPATIAL_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_resume_into_a_directory_of_another_configuration_is_refused(fixture_set, tiny_qwen3_vl_small,
                                                                    tmp_path):
    out = tmp_path / "out"
    evaluate(small(fixture_set, tiny_qwen3_vl_small, out), progress=False)
    rows = (out / "samples.jsonl").read_bytes()
    evaluate(small(fixture_set, tiny_qwen3_vl_small, out), engine=NoEngine(), progress=False)  # same key
    copy = tmp_path / "copy"
    shutil.copytree(tiny_qwen3_vl_small, copy)
    fixture_copy = tmp_path / "fx"
    shutil.copytree(fixture_set.omnispatial, fixture_copy)
    data = json.loads((fixture_copy / "OmniSpatial-test" / "data.json").read_text())
    (fixture_copy / "OmniSpatial-test" / "data.json").write_text(json.dumps(data[1:]))  # one deleted
    changes = [
        ({"temperature": 1.5}, "sampling.temperature: 0.6 -> 1.5"),
        ({"max_new_tokens": 5}, "sampling.max_new_tokens: 4 -> 5"),
        ({"seed": 1}, "sampling.seed: 0 -> 1"),
        ({"mode": "hard"}, "mode: fixed -> hard"),
        ({"protocol": "official"}, "protocol: ours -> official"),
        ({"soft_thinking.top_k": 3}, "soft_thinking.top_k: 5 -> 3"),
        ({"model.path": copy}, f"model.path: {tiny_qwen3_vl_small} -> {copy}"),
        ({"data.omnispatial": fixture_copy}, "data.omnispatial.sha256"),
        # the selection decides which rows are decoded together (issue 55 item 5)
        ({"samples": 2}, "samples: 1 -> 2"), ({"limit": "null"}, "limit: 2 -> None"),
        ({"task_types": "[Perspective_Taking]"}, "task_types: None -> ['Perspective_Taking']"),
    ]
    for over, expected in changes:
        with pytest.raises(RunKeyMismatch, match=re.escape(expected)) as info:
            evaluate(small(fixture_set, tiny_qwen3_vl_small, out, **over), engine=NoEngine(),
                     progress=False)
        assert "choose another output_dir" in str(info.value)
    assert (out / "samples.jsonl").read_bytes() == rows  # nothing was touched


def test_weights_fingerprint_follows_content_not_location(tiny_qwen3_vl_small, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(tiny_qwen3_vl_small, copy)
    assert weights_fingerprint(copy) == weights_fingerprint(tiny_qwen3_vl_small)
    big = copy / "model-00002.safetensors"  # a large shard
    big.write_bytes(bytes(5 << 20))
    before = weights_fingerprint(copy)
    with open(big, "r+b") as f:
        f.seek((5 << 20) - 10)
        f.write(b"\x01")  # a fine-tune changes the weights at the end of a shard
    assert weights_fingerprint(copy) != before


def test_results_without_a_run_key_are_not_trusted(fixture_set, tiny_qwen3_vl_small, tmp_path):
    out = tmp_path / "legacy"
    out.mkdir()
    (out / "samples.jsonl").write_text('{"benchmark": "omnispatial"}\n')
    with pytest.raises(RunKeyMismatch, match="without a run key"):
        evaluate(small(fixture_set, tiny_qwen3_vl_small, out), engine=NoEngine(), progress=False)


def test_weights_fingerprint_sees_a_change_in_the_middle_of_a_large_file(tmp_path, private_cache):
    model = tmp_path / "m"
    model.mkdir()
    (model / "config.json").write_text("{}")
    data = bytearray(os.urandom(9 << 20))
    (model / "model.safetensors").write_bytes(data)
    before = runkey.weights_fingerprint(model)
    for offset in (0, 3 << 20, (9 << 20) // 2, (9 << 20) - 1):  # head, middle, tail
        new = data[offset] ^ 0xFF  # another byte (a fixed 0xFF left a random 0xFF as it was: 1 run in 64)
        overwrite_in_place(model / "model.safetensors", offset, bytes([new]))
        data[offset] = new
        after = runkey.weights_fingerprint(model)
        assert after != before
        before = after
    # every byte counts: the file's digest is sha256 of its whole content
    assert runkey.file_sha256(model / "model.safetensors") == hashlib.sha256(data).hexdigest()


def test_a_re_run_after_the_weights_changed_in_place_is_refused(fixture_set, tiny_7mb, tmp_path,
                                                                private_cache):
    model = tmp_path / "model"
    shutil.copytree(tiny_7mb, model)
    out = tmp_path / "out"
    evaluate(small(fixture_set, model, out), progress=False)
    name = zero_middle_tensor(model / "model.safetensors")
    assert name  # a tensor in the middle of a 7 MB file, neither in its first nor its last MiB
    with pytest.raises(RunKeyMismatch, match=r"model\.fingerprint: "):
        evaluate(small(fixture_set, model, out), engine=NoEngine(), progress=False)


def test_a_re_run_after_an_images_pixels_changed_is_refused_naming_the_image(
        fixture_set, tiny_qwen3_vl_small, tmp_path, private_cache, monkeypatch):
    from PIL import Image
    data = tmp_path / "data"
    shutil.copytree(fixture_set.omnispatial, data)
    out = tmp_path / "out"
    evaluate(small(fixture_set, tiny_qwen3_vl_small, out, **{"data.omnispatial": data}), progress=False)
    images = json.loads((out / "run_key.json").read_text())["data"]["omnispatial"]["images"]
    pngs = sorted((data / "OmniSpatial-test").rglob("*.png"))
    assert images == {p.relative_to(data).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
                      for p in pngs}  # every image of the split, each byte: not only limit=2's
    reads = []
    digest = hashlib.file_digest
    monkeypatch.setattr(hashlib, "file_digest",
                        lambda f, name: reads.append(os.path.basename(f.name)) or digest(f, name))
    before = tree(out)
    evaluate(small(fixture_set, tiny_qwen3_vl_small, out, **{"data.omnispatial": data}),
             engine=NoEngine(), progress=False)  # unchanged: a no-op that reads no file again
    assert reads == [] and tree(out) == before
    image = pngs[0]  # the first question's: a corrected release, the same data.json
    with Image.open(image) as img:
        fixed = img.copy()
    fixed.putpixel((0, 0), tuple(255 - c for c in fixed.getpixel((0, 0))))
    fixed.save(image)
    name = image.relative_to(data).as_posix()
    with pytest.raises(RunKeyMismatch, match=re.escape(f"data.omnispatial.images.{name}: "
                                                       f"{images[name]} -> ")):
        evaluate(small(fixture_set, tiny_qwen3_vl_small, out, **{"data.omnispatial": data}),
                 engine=NoEngine(), progress=False)
    assert reads == [image.name] and tree(out) == before  # only the changed file was read
    # a key recorded before images were: refused in one line saying so
    key = json.loads((out / "run_key.json").read_text())
    del key["data"]["omnispatial"]["images"]
    (out / "run_key.json").write_text(json.dumps(key, indent=2) + "\n")
    with pytest.raises(RunKeyMismatch, match=r"data\.omnispatial\.images: \(absent\) -> 9 image "
                                             r"files\n.*data\.omnispatial\.images: not recorded"):
        evaluate(small(fixture_set, tiny_qwen3_vl_small, out, **{"data.omnispatial": data}),
                 engine=NoEngine(), progress=False)


def test_a_refusal_lists_a_few_changed_images_and_counts_the_rest():
    old = {"data": {"b": {"images": {f"{i}.png": "0" * 64 for i in range(40)}, "split": "test"}}}
    new = json.loads(json.dumps(old))
    for i in range(12):
        new["data"]["b"]["images"][f"{i}.png"] = "1" * 64
    del new["data"]["b"]["images"]["39.png"]
    lines = runkey.key_differences(old, new)
    assert lines[:runkey.SHOWN_IMAGES] == [f"data.b.images.{n}.png: {'0' * 64} -> {'1' * 64}"
                                           for n in sorted(map(str, range(12)))[:runkey.SHOWN_IMAGES]]
    assert lines[runkey.SHOWN_IMAGES:] == [f"data.b.images: {13 - runkey.SHOWN_IMAGES} more of 40 "
                                           f"image files differ"]
    assert runkey.key_differences(old, old) == []


def test_digest_cache_reads_each_file_once_until_it_changes(tmp_path, private_cache, monkeypatch):
    model = tmp_path / "m"
    model.mkdir()
    for name, size in (("config.json", 10), ("a.safetensors", 6 << 20), ("b.safetensors", 5 << 20)):
        (model / name).write_bytes(os.urandom(size))
    reads = []
    digest = hashlib.file_digest
    monkeypatch.setattr(hashlib, "file_digest",
                        lambda f, name: reads.append(os.path.basename(f.name)) or digest(f, name))

    def fingerprint():
        with runkey.sha256_cache() as cache:
            return runkey.weights_fingerprint(model, cache)

    first = fingerprint()
    assert sorted(reads) == ["a.safetensors", "b.safetensors", "config.json"]
    assert fingerprint() == first and len(reads) == 3  # nothing read again
    overwrite_in_place(model / "a.safetensors", 3 << 20, b"\x00\x01")
    changed = fingerprint()
    assert reads[3:] == ["a.safetensors"] and changed != first
    # a file replaced by another of the same size and mtime is read again
    st = os.stat(model / "b.safetensors")
    (tmp_path / "b2").write_bytes(os.urandom(5 << 20))
    os.utime(tmp_path / "b2", ns=(st.st_atime_ns, st.st_mtime_ns))
    os.replace(tmp_path / "b2", model / "b.safetensors")
    replaced = fingerprint()
    assert reads[4:] == ["b.safetensors"] and replaced != changed
    monkeypatch.setattr(hashlib, "file_digest", digest)
    assert replaced == runkey.weights_fingerprint(model)  # the cache agrees with no cache
    stored = private_cache / runkey.SHA256_CACHE
    stored.write_text("{not json")  # a broken cache is ignored, then rewritten
    assert fingerprint() == replaced and json.loads(stored.read_text())


def test_batch_rows_is_part_of_the_run_key(fixture_set, tiny_qwen3_vl_small, tmp_path):
    out = tmp_path / "out"
    evaluate(small(fixture_set, tiny_qwen3_vl_small, out, batch_rows=4), progress=False)
    assert json.loads((out / "run_key.json").read_text())["batch_rows"] == 4
    before = tree(out)
    with pytest.raises(RunKeyMismatch, match=re.escape("batch_rows: 4 -> 2")):
        evaluate(small(fixture_set, tiny_qwen3_vl_small, out, batch_rows=2), engine=NoEngine(),
                 progress=False)
    assert tree(out) == before  # refused: nothing changed
    evaluate(small(fixture_set, tiny_qwen3_vl_small, out, batch_rows=4), engine=NoEngine(),
             progress=False)  # the same value resumes
    # a run key written before batch_rows was recorded: refused, naming the field and why
    key = json.loads((out / "run_key.json").read_text())
    key.pop("batch_rows", None)
    (out / "run_key.json").write_text(json.dumps(key, indent=2) + "\n")
    before = tree(out)
    with pytest.raises(RunKeyMismatch, match=r"batch_rows: \(absent\) -> 4(.|\n)*not recorded"):
        evaluate(small(fixture_set, tiny_qwen3_vl_small, out, batch_rows=4), engine=NoEngine(),
                 progress=False)
    assert tree(out) == before
