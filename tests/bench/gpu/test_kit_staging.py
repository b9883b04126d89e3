"""Staging (scripts/gpu/gpukit/staging.py and recipe.py), without the network: stage d's pack
limit, the packs each stage needs, the verl pack's closure less the device image and the sglang
pack, wheels that run on CPython 3.12, and ``stage`` end to end with the downloads stood in for."""
import kit_helpers  # noqa: F401  (scripts/gpu on the path)
import pytest

from gpukit import recipe, staging


def test_stage_d_pack_limit(tmp_path):
    pack = tmp_path / "sglang.tar.xz"
    with open(pack, "wb") as f:
        f.truncate(staging.STAGE_D_LIMIT)
    staging.check_stage_d([{"name": "sglang", "path": str(pack)}])
    staging.check_stage_d([{"name": "verl", "path": str(pack)}])
    with open(pack, "ab") as f:
        f.write(b"x")
    staging.check_stage_d([{"name": "verl", "path": str(pack)}])  # only the sglang pack is bound
    with pytest.raises(SystemExit, match="exceeds stage d's 50 MiB"):
        staging.check_stage_d([{"name": "sglang", "path": str(pack)}])


def test_stages_map_to_packs():
    assert recipe.packs_for(["d"]) == ["sglang"] and recipe.packs_for(["b"]) == []
    assert recipe.packs_for(["e"]) == recipe.packs_for(["a", "c"]) == ["sglang", "verl"]
    with pytest.raises(SystemExit, match="unknown stage 'z'"):
        recipe.packs_for(["z"])


def test_verl_pack_skips_the_image_and_the_sglang_pack():
    want = staging.pack_pins("verl", staging.device_packages())
    assert {"verl", "ray", "tensordict", "hydra-core"} <= set(want)
    assert not {"torch", "numpy", "triton", "wandb"} & set(want)  # image, or SKIP
    assert not set(recipe.SGLANG_PINS) & set(want)  # transformers, pydantic, ... come with sglang
    assert staging.runs_on_cp312("tokenizers-0.22.2-cp39-abi3-manylinux_2_17_x86_64.whl")
    assert not staging.runs_on_cp312("ray-2.60.0-cp311-cp311-manylinux2014_x86_64.whl")


def test_stage_builds_each_pack_and_writes_the_calls(tmp_path, monkeypatch, capsys):
    """``kit.py stage`` end to end with the network stood in for (the wheels, libnuma): each pack
    built from its pins, the kit written as one call with the manifest and the commit it was
    staged from, and the call's carry line printed; stages that need no pack stage nothing."""
    from kit_helpers import make_wheel

    (tmp_path / "w").mkdir()
    pins = {"sglang": {"kitbig": "1.0"}, "verl": {"kitsmall": "1.0"}}
    wheels = {n: make_wheel(tmp_path / "w", n, {f"{n}/__init__.py": b"X = 1\n"})
              for p in pins.values() for n in p}
    lib = tmp_path / "libnuma.so.1"
    lib.write_bytes(b"\x7fELF")
    monkeypatch.setattr(staging, "device_packages", lambda: set())
    monkeypatch.setattr(staging, "pack_pins", lambda pack, on_device: pins[pack])
    monkeypatch.setattr(staging, "download", lambda p, d: {n: wheels[n] for n in p})
    monkeypatch.setattr(staging, "fetch_numa", lambda out: lib)
    monkeypatch.setattr(staging, "tree_bytes", lambda: 3 << 20)
    staging.stage(tmp_path / "kit", ["d", "e"], preset=0)
    out = capsys.readouterr().out
    send = tmp_path / "kit" / "send" / "01"
    assert sorted(p.name for p in send.iterdir()) == ["COMMIT", "manifest.json", "sglang.tar.xz",
                                                      "verl.tar.xz"]
    assert "kit.py stage: 1 device call(s), project tree 3.00 MiB" in out
    assert f'carry ["{send}"]' in out and "stages a,c,d,e,f" in out  # the sglang pack's stages
    staging.stage(tmp_path / "none", ["b"])
    assert "stages b need nothing beyond the device image" in capsys.readouterr().out
    assert not (tmp_path / "none").exists()
