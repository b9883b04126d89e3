"""The command line (soft_spatial/data/synthetic/cli.py) and ``python -m
soft_spatial.data.synthetic`` (its __main__.py)."""
from __future__ import annotations

import json
import runpy
import sys

import pytest

from soft_spatial.data.synthetic import COLORS, corpus, main


def test_cli_and_corpus(tmp_path, capsys):
    chance = main(["--out", str(tmp_path), "--train", "10", "--test", "10", "--seed", "4",
                   "--options", "4", "--tasks", "counting,depth_order", "--max-count", "3"])
    assert chance["test"]["overall"] == pytest.approx(25.0)
    raw = json.loads((tmp_path / "OmniSpatial-train" / "data.json").read_text())
    assert {r["synthetic_task"] for r in raw} == {"counting", "depth_order"}
    assert "chance on test" in capsys.readouterr().out
    text = " ".join(corpus(repeat=1))
    assert all(c in text for c in COLORS) and "You answer multiple-choice" in text


def test_python_dash_m_runs_the_command_with_its_arguments(tmp_path, monkeypatch, capsys):
    """``python -m soft_spatial.data.synthetic ARGS`` (run here as ``__main__``, in this process)
    writes what ``main(ARGS)`` writes, byte for byte."""
    args = ["--train", "6", "--test", "4", "--seed", "1", "--tasks", "mental_rotation,path_two",
            "--describe"]
    main(["--out", str(tmp_path / "call"), *args])
    monkeypatch.setattr(sys, "argv", ["synthetic", "--out", str(tmp_path / "module"), *args])
    runpy.run_module("soft_spatial.data.synthetic", run_name="__main__", alter_sys=True)
    assert "chance on test" in capsys.readouterr().out
    made = sorted(p.relative_to(tmp_path / "call") for p in (tmp_path / "call").rglob("*")
                  if p.is_file())
    assert len(made) == 1 + 2 + 6 + 4  # README, two data.json, one PNG per question
    for rel in made:
        assert (tmp_path / "call" / rel).read_bytes() == (tmp_path / "module" / rel).read_bytes()
