"""The device side (scripts/gpu/gpukit/install.py, through ``kit.py install``), on a real kit of
two tiny packs: split across calls, every call carrying the whole manifest; install waits naming
the calls still missing, reassembles, unpacks and exports the paths; a second install is a
no-op; a new kit replaces an installed pack; a corrupt piece is named and nothing changes."""
import json
import os
import subprocess
import sys

from kit_helpers import ROOT, make_wheel

from gpukit import calls, install, packs


def _kit(tmp_path, budget: int, payload: int = 300_000):
    """Two packs of a real (tiny) pack build: 'sglang' (incompressible, split when over budget)
    with a lib folder, and 'verl'."""
    big = make_wheel(tmp_path, "kitbig", {"kitbig/__init__.py": b"VALUE = 42\n",
                                      "kitbig/blob.bin": os.urandom(payload)})
    small = make_wheel(tmp_path, "kitsmall", {"kitsmall/__init__.py": b"VALUE = 7\n"})
    lib = tmp_path / "libnuma.so.1"
    lib.write_bytes(b"\x7fELF")
    built = [packs.build_pack("sglang", {"kitbig": big}, [lib], tmp_path / "build", preset=0),
             packs.build_pack("verl", {"kitsmall": small}, [], tmp_path / "build", preset=0)]
    return calls.write_kit(built, tmp_path / "kit", budget)


def _install(src, store, stages="a,b,c,d,e,f"):
    return subprocess.run([sys.executable, str(ROOT / "scripts/gpu/kit.py"), "install", "--from",
                           str(src), "--store", str(store), "--stages", stages],
                          capture_output=True, text=True)


def test_split_calls_reassemble_install_and_repeat_as_a_no_op(tmp_path):
    budget = 128 * 1024
    manifest = _kit(tmp_path, budget)
    sg = manifest["packs"][0]
    assert len(sg["parts"]) == 3 and all(p["size"] <= budget for p in sg["parts"])
    calls = sorted((tmp_path / "kit" / "send").iterdir())
    assert len(calls) == len(manifest["calls"]) == 3
    for c in calls:  # every call carries the whole manifest and at most the budget
        assert json.loads((c / "manifest.json").read_text()) == manifest
        assert sum(f.stat().st_size for f in c.iterdir() if f.name != "manifest.json") <= budget
    store = tmp_path / "store"
    first = _install(calls[0], store)
    assert first.returncode == 3, first.stderr
    assert "stage d waits for pack(s) sglang (send/02, send/03)" in first.stdout
    assert "stage b ready" in first.stdout
    assert _install(calls[1], store).returncode == 3
    last = _install(calls[2], store)
    assert last.returncode == 0, last.stderr
    assert "stage e ready" in last.stdout and "pack sglang unpacked" in last.stdout
    exports = [ln for ln in last.stdout.splitlines() if ln.startswith("export ")]
    assert (store / "env.sh").read_text().splitlines() == exports
    assert exports[0] == f"export PYTHONPATH={store}/sglang/site:{store}/verl/site:{ROOT}"
    assert exports[1].startswith(f"export LD_LIBRARY_PATH={store}/sglang/lib$")
    assert (store / "sglang/lib/libnuma.so.1").is_file()
    assert not list((store / "pieces").iterdir())  # pieces go once unpacked
    probe = subprocess.run(["bash", "-c", f"{exports[0]}; {sys.executable} -c "
                            "'import kitbig, kitsmall; print(kitbig.VALUE + kitsmall.VALUE)'"],
                           capture_output=True, text=True)
    assert probe.stdout.strip() == "49", probe.stderr
    # the same call again (and any call of this kit) changes nothing
    before = {p: p.stat().st_mtime_ns for p in store.rglob("*") if p.is_file()}
    again = _install(calls[2], store)
    assert again.returncode == 0 and "unpacked" not in again.stdout
    assert [ln for ln in again.stdout.splitlines() if ln.startswith("export ")] == exports
    assert {p: p.stat().st_mtime_ns for p in before} == before


def test_a_new_kit_replaces_an_installed_pack(tmp_path):
    (tmp_path / "old").mkdir()
    (tmp_path / "new").mkdir()
    old, new = _kit(tmp_path / "old", budget=1 << 30), _kit(tmp_path / "new", budget=1 << 30)
    assert old["packs"][0]["sha256"] != new["packs"][0]["sha256"]  # fresh random payloads
    store = tmp_path / "store"
    assert _install(tmp_path / "old/kit/send/01", store).returncode == 0
    res = _install(tmp_path / "new/kit/send/01", store)
    assert res.returncode == 0 and "pack sglang unpacked" in res.stdout
    assert install.installed(store, new["packs"][0]) and not install.installed(store, old["packs"][0])


def test_corrupt_piece_is_named_and_nothing_changes(tmp_path):
    _kit(tmp_path, 128 * 1024)
    calls = sorted((tmp_path / "kit" / "send").iterdir())
    part = next(p for p in calls[1].iterdir() if ".part" in p.name)
    data = bytearray(part.read_bytes())
    data[100] ^= 0xFF
    part.write_bytes(bytes(data))
    store = tmp_path / "store"
    assert _install(calls[0], store).returncode == 3
    before = sorted(p.name for p in (store / "pieces").iterdir())
    res = _install(calls[1], store)
    assert res.returncode not in (0, 3)
    assert f"{part.name}: sha256 mismatch" in res.stderr
    assert sorted(p.name for p in (store / "pieces").iterdir()) == before
    assert not (store / "sglang").exists()
