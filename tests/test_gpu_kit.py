"""The GPU kit's CPU-side parts: staging (split → batches → reassembly → sha256 → pip install
--target of a small local wheel) and check.py's --help and --dry-run (each stage's logic at tiny
sizes on the CPU). No download: the wheel is built here."""
import base64
import hashlib
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts" / "gpu"))
import kit  # noqa: E402


def _wheel(dir_: Path, payload_bytes: int, name: str = "kitprobe") -> Path:
    """A pure-Python wheel ``name`` whose data file makes it ``payload_bytes`` large."""
    info = f"{name}-1.0.dist-info"
    files = {f"{name}/__init__.py": b"VALUE = 42\n",
             f"{name}/blob.bin": os.urandom(payload_bytes),
             f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n".encode(),
             f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                              b"Tag: py3-none-any\n"}
    record = "".join(
        f"{f},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},"
        f"{len(data)}\n" for f, data in files.items()) + f"{info}/RECORD,,\n"
    path = dir_ / f"{name}-1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        for f, data in files.items():
            z.writestr(f, data)
        z.writestr(f"{info}/RECORD", record)
    return path


def _install(batch, store, site, stages="a"):
    return subprocess.run([sys.executable, str(ROOT / "scripts/gpu/kit.py"), "install", "--batch",
                           str(batch), "--store", str(store), "--site", str(site), "--stages", stages],
                          capture_output=True, text=True)


def test_split_send_reassemble_and_install(tmp_path):
    wheel = _wheel(tmp_path, 700_000)
    small = _wheel(tmp_path, 10, name="kitsmall")  # stage c only: not installed for stage a
    manifest = kit.write_kit({str(wheel): ["a"], str(small): ["c"]}, tmp_path / "kit", 0.25)
    entry = next(f for f in manifest["files"] if f["name"] == wheel.name and "parts" in f)
    assert len(entry["parts"]) == 3  # 700 kB in parts of at most 0.25 MiB
    batches = sorted((tmp_path / "kit" / "send").iterdir())
    assert len(batches) >= 3
    for b in batches:  # every call carries the whole manifest and at most one batch's bytes
        assert json.loads((b / "manifest.json").read_text())["files"] == manifest["files"]
        assert sum(f.stat().st_size for f in b.iterdir() if f.name != "manifest.json") <= 0.25 * 2**20
    store, site = tmp_path / "store", tmp_path / "site"
    results = [_install(b, store, site) for b in batches]
    assert [r.returncode for r in results[:-1]] == [3] * (len(batches) - 1), results[0].stdout
    assert "stage a waits for 1 wheel(s): kitprobe-1.0-py3-none-any.whl" in results[0].stdout
    assert results[-1].returncode == 0, results[-1].stderr
    assert kit.sha256(store / wheel.name) == hashlib.sha256(wheel.read_bytes()).hexdigest()
    assert not list(store.glob("*.part*"))  # parts are removed once reassembled
    probe = subprocess.run([sys.executable, "-c", "import kitprobe; print(kitprobe.VALUE)"],
                           env={**os.environ, "PYTHONPATH": str(site)}, capture_output=True,
                           text=True)
    assert probe.stdout.strip() == "42", probe.stderr
    # a second call with the same batch installs nothing new and still reports ready
    again = _install(batches[-1], store, site)
    assert again.returncode == 0 and "stage a ready" in again.stdout


def test_corrupt_part_is_refused_with_its_name(tmp_path):
    wheel = _wheel(tmp_path, 400_000)
    kit.write_kit({str(wheel): ["a"]}, tmp_path / "kit", 0.25)
    batches = sorted((tmp_path / "kit" / "send").iterdir())
    part = next(p for p in batches[0].iterdir() if ".part" in p.name)
    data = bytearray(part.read_bytes())
    data[100] ^= 0xFF
    part.write_bytes(bytes(data))
    store, site = tmp_path / "store", tmp_path / "site"
    results = [_install(b, store, site) for b in batches]
    assert results[-1].returncode != 0
    assert f"{part.name}: sha256 mismatch" in results[-1].stderr


def test_batches_fill_in_stage_order_and_respect_the_limit(tmp_path):
    items = [(tmp_path / f"f{i}", size, prio) for i, (size, prio) in
             enumerate([(60, 2), (50, 0), (30, 0), (40, 1), (20, 2)])]
    batches = kit.pack_batches(items, 100)
    sizes = {p.name: s for p, s, _ in items}
    assert all(sum(sizes[p.name] for p in b) <= 100 for b in batches)
    assert [p.name for p in batches[0]][:2] == ["f1", "f2"]  # stage a's files come first
    with pytest.raises(ValueError, match="exceeds the batch size"):
        kit.pack_batches([(tmp_path / "big", 101, 0)], 100)


def test_selection_skips_what_the_device_image_has():
    want = kit.select(["a", "c"], kit.device_packages())
    assert want["transformers"][0] == "5.10.4" and want["tokenizers"][0] == "0.22.2"  # our pins
    assert {"verl", "ray", "tensordict"} <= set(want)
    assert want["verl"][1] == {"c"} and want["transformers"][1] == {"a", "c"}
    assert not {"torch", "numpy", "triton", "wandb"} & set(want)
    assert kit.runs_on_cp312("tokenizers-0.22.2-cp39-abi3-manylinux_2_17_x86_64.whl")
    assert not kit.runs_on_cp312("ray-2.60.0-cp311-cp311-manylinux2014_x86_64.whl")


def _check(tmp_path, *args):
    out = tmp_path / "report.md"
    res = subprocess.run([sys.executable, str(ROOT / "scripts/gpu/check.py"), *args, "--out",
                          str(out)], capture_output=True, text=True, cwd=tmp_path)
    return res, (out.read_text() if out.exists() else "")


def test_check_help(tmp_path):
    res, _ = _check(tmp_path, "--help")
    assert res.returncode == 0 and "--dry-run" in res.stdout and "Stages" in res.stdout


def test_check_dry_run_engine_and_softthink_stages(tmp_path):
    res, report = _check(tmp_path, "--dry-run", "--stages", "a,b,d")
    assert res.returncode == 0, res.stderr[-3000:]
    assert "## a. Embedded engine" in report and "## b. softthink" in report
    assert report.count("**ok**") == 2 and "**skipped**" in report  # d: no sglang in .venv
    assert "Greedy limit (float32): 2/2 prompts decode the same" in report
    assert "| adaptsoft |" in report and "| 256 |" in report  # throughput and alignment tables


@pytest.mark.slow
def test_check_dry_run_actor_update_stage(tmp_path):
    res, report = _check(tmp_path, "--dry-run", "--stages", "c")
    assert res.returncode == 0, res.stderr[-3000:] + report
    assert "**ok**" in report
    for mode in ("hard", "soft_fixed", "adaptsoft"):
        assert f"| {mode} |" in report
