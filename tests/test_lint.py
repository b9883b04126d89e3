"""The code stays in one style: ``ruff check`` with pyproject.toml's [tool.ruff] finds nothing in the
package, the tests and the scripts (one line length, PEP 585/604 typing, no unused imports or names).
Fix a failure with ``python -m ruff check --fix`` and by hand for what it cannot fix."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHECKED = ("soft_spatial", "soft_spatial_bench", "tests", "scripts")


def _ruff(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=300)


def test_ruff_check_is_clean():
    res = _ruff(*CHECKED)
    assert res.returncode == 0, f"ruff check {' '.join(CHECKED)} found problems:\n{res.stdout}{res.stderr}"


def test_ruff_config_flags_each_habit(tmp_path):
    """The configuration selects the rules the clean run above relies on."""
    bad = tmp_path / "bad.py"
    bad.write_text("import os\n"                                   # F401
                   "from typing import List, Optional\n"           # UP035
                   "\n\n"
                   "def f(x: Optional[List[int]]) -> None:\n"      # UP045, UP006
                   "    unused = 1\n"                              # F841
                   f"    return {'x' * 130!r}\n")                  # E501 at 120
    res = _ruff("--config", str(ROOT / "pyproject.toml"), "--output-format", "concise", str(bad),
                cwd=tmp_path)
    assert res.returncode == 1, res.stdout + res.stderr
    for code in ("F401", "UP035", "UP045", "UP006", "F841", "E501"):
        assert code in res.stdout, f"{code} not reported:\n{res.stdout}"


def _torch_loads(tree) -> list[tuple[int, bool]]:
    """(line, weights_only=True given) of every ``torch.load(...)`` call in a module's AST."""
    import ast
    out = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "load" and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "torch"):
            safe = any(k.arg == "weights_only" and isinstance(k.value, ast.Constant)
                       and k.value.value is True for k in node.keywords)
            out.append((node.lineno, safe))
    return out


def test_no_torch_load_in_the_package_can_run_code():
    """Every ``torch.load`` in soft_spatial/ and soft_spatial_bench/ passes ``weights_only=True`` (a
    checkpoint, a batch or a state file may come from elsewhere: an unpickled object runs code), and
    nothing calls ``pickle.load``."""
    import ast
    bad = []
    for path in sorted((ROOT / "soft_spatial").rglob("*.py")) + sorted((ROOT / "soft_spatial_bench").rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        bad += [f"{path.relative_to(ROOT)}:{line}: torch.load without weights_only=True"
                for line, safe in _torch_loads(ast.parse(text)) if not safe]
        bad += [f"{path.relative_to(ROOT)}: pickle.load" for _ in [1] if "pickle.load" in text]
    assert bad == []


def test_the_torch_load_scan_sees_an_unsafe_call():
    import ast
    tree = ast.parse("import torch\nx = torch.load(p)\ny = torch.load(p, weights_only=False)\n"
                     "z = torch.load(p, map_location='cpu', weights_only=True)\n")
    assert _torch_loads(tree) == [(2, False), (3, False), (4, True)]


def _long_functions(path: Path, limit: int, root: Path = ROOT) -> list[str]:
    import ast
    tree = ast.parse(path.read_text())
    return [f"{path.relative_to(root)}:{n.lineno} {n.name} ({n.end_lineno - n.lineno + 1} lines)"
            for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
            and n.end_lineno - n.lineno + 1 > limit]


def test_no_function_of_the_package_or_its_scripts_is_longer_than_80_lines(tmp_path):
    files = [p for d in ("soft_spatial", "soft_spatial_bench", "scripts") for p in sorted((ROOT / d).rglob("*.py"))]
    assert len(files) > 200
    assert [f for p in files for f in _long_functions(p, 80)] == []
    long = tmp_path / "long.py"  # the scan sees one of 81 lines, and not one of 80
    long.write_text("def f():\n" + "    x = 1\n" * 80 + "def g():\n" + "    x = 1\n" * 79)
    assert _long_functions(long, 80, tmp_path) == ["long.py:1 f (81 lines)"]
