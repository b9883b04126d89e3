"""The learning experiment's former command (soft_spatial/lab/learn.py) is refused in one line
naming the new one; nothing runs, nothing is written."""
from __future__ import annotations

import subprocess
import sys


def test_the_former_name_is_refused_naming_the_new_one(tmp_path):
    res = subprocess.run([sys.executable, "-m", "soft_spatial.lab.learn", "budget=demo",
                          f"out={tmp_path / 'out'}"], capture_output=True, text=True, cwd=tmp_path,
                         timeout=60)
    assert res.returncode == 1 and list(tmp_path.iterdir()) == []
    assert res.stderr.strip() == ("python -m soft_spatial.lab.learn is now python -m "
                                  "soft_spatial.lab.learning (the same arguments; nothing was run)")
