"""torch's and verl's imports without the collector's passes over them
(`soft_spatial.infra.gc_imports`): in a fresh interpreter, the import runs with the collector off,
its objects end frozen, the collector is back on and the finder is gone; a look-up of the spec
alone (what ``train.verl_config_dir`` does) leaves the deferral for the real import; an import
within another deferred one leaves the collector to the outer one."""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

CHILD = r"""
import gc, importlib.util, json, sys
from soft_spatial.infra import gc_imports
seen = []
gc.callbacks.append(lambda phase, info: seen.append(info["generation"]) if phase == "start" else None)
gc_imports.defer_collection(["json_pkg"])
assert importlib.util.find_spec("json_pkg") is not None  # a look-up only
assert any(isinstance(f, gc_imports._Deferred) for f in sys.meta_path)
import json_pkg
print(json.dumps({"during": json_pkg.ENABLED, "inner": json_pkg.INNER, "after": gc.isenabled(),
                  "frozen": gc.get_freeze_count() > 0, "collections": seen,
                  "finder_left": any(isinstance(f, gc_imports._Deferred) for f in sys.meta_path)}))
"""


def test_a_deferred_import_runs_without_collection_then_freezes(tmp_path):
    pkg = tmp_path / "json_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(
        "import gc\nENABLED = gc.isenabled()\nx = [[i] for i in range(100000)]\n"
        "from json_pkg import inner\nINNER = inner.ENABLED\n")
    (pkg / "inner.py").write_text("import gc\nENABLED = gc.isenabled()\n")
    out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, cwd=tmp_path,
                         env={"PYTHONPATH": f"{tmp_path}:{ROOT}"}, check=True)
    import json
    got = json.loads(out.stdout)
    assert got["during"] is False and got["inner"] is False and got["after"] is True
    assert got["frozen"] and not got["finder_left"]
    assert got["collections"] == [2]  # the one full collection after the import, no other


def test_an_imported_package_is_left_alone():
    code = ("import sys, gc, json; from soft_spatial.infra import gc_imports; "
            "gc_imports.defer_collection(['json']); "
            "print(any(isinstance(f, gc_imports._Deferred) for f in sys.meta_path))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "False"
