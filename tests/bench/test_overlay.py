"""The CPU benches' re-execution into SGLang's CPU environment (soft_spatial_bench/overlay.py):
already there, nothing happens; without the overlay, one line naming the setup script; else the
process is re-executed with the overlay and the stand-ins first on its path."""
from __future__ import annotations

import os
import sys

import pytest

from soft_spatial_bench import overlay


def test_already_in_the_environment_nothing_happens(monkeypatch, tmp_path):
    monkeypatch.setenv("SOFT_SPATIAL_SGLANG_OVERLAY", str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", f"/a{os.pathsep}{tmp_path}")
    monkeypatch.setenv("SGLANG_USE_CPU_ENGINE", "1")
    monkeypatch.setattr(os, "execve", lambda *a: pytest.fail("re-executed"))
    assert overlay.reexec_with_sglang_overlay("bench_x") is None


def test_without_the_overlay_one_line_names_the_setup(monkeypatch, tmp_path):
    monkeypatch.setenv("SOFT_SPATIAL_SGLANG_OVERLAY", str(tmp_path / "missing"))
    monkeypatch.delenv("SGLANG_USE_CPU_ENGINE", raising=False)
    with pytest.raises(SystemExit, match="bench_x: no SGLang overlay at .*setup_sglang_overlay.sh"):
        overlay.reexec_with_sglang_overlay("bench_x")


def test_the_process_is_re_executed_with_the_overlay_first(monkeypatch, tmp_path):
    monkeypatch.setenv("SOFT_SPATIAL_SGLANG_OVERLAY", str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", "/mine")
    monkeypatch.delenv("SGLANG_USE_CPU_ENGINE", raising=False)
    calls = []
    monkeypatch.setattr(os, "execve", lambda exe, argv, env: calls.append((exe, argv, env)))
    overlay.reexec_with_sglang_overlay("bench_x")
    (exe, argv, env), = calls
    assert exe == sys.executable and argv[0] == sys.executable
    path = env["PYTHONPATH"].split(os.pathsep)
    assert path == [str(tmp_path), str(overlay.ROOT / "tests" / "sglang_stubs"), "/mine"]
    assert env["SGLANG_USE_CPU_ENGINE"] == "1" and env["HF_HUB_OFFLINE"] == "1"
