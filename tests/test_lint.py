"""The code stays in one style: ``ruff check`` with pyproject.toml's [tool.ruff] finds nothing in the
package, the tests and the scripts (one line length, PEP 585/604 typing, no unused imports or names).
Fix a failure with ``python -m ruff check --fix`` and by hand for what it cannot fix."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHECKED = ("soft_spatial", "tests", "scripts")


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
