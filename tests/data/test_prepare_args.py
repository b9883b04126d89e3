"""``python -m soft_spatial.data.prepare``'s arguments: a bad ``--limit`` is refused at argument
parsing, naming ``--limit``, before the benchmark is read or anything is written (``--limit 0``
used to end in an error about the prompt length; ``--limit -1`` silently dropped the last record)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from soft_spatial.data.fixtures import write_fixtures
from soft_spatial.data.prepare import main, parse_args


def _argv(root: Path, out: Path, limit: str) -> list[str]:
    return ["--benchmark", "omnispatial", "--root", str(root), "--out", str(out),
            "--processor", str(root.parent / "no-processor-needed"), "--limit", limit]


@pytest.mark.parametrize("limit", ["0", "-1", "-100", "two", "1.5", ""])
def test_a_bad_limit_is_refused_naming_it_before_anything_is_written(tmp_path: Path, capsys, limit: str):
    fx = write_fixtures(tmp_path / "fx")
    out = tmp_path / "out" / "train.parquet"
    with pytest.raises(SystemExit) as info:
        main(_argv(fx.omnispatial, out, limit))
    assert info.value.code == 2  # argparse's usage error, before the benchmark or the processor is read
    err = capsys.readouterr().err
    assert "--limit" in err and "at least 1" in err and repr(limit) in err
    assert not (tmp_path / "out").exists()


def test_a_good_limit_is_kept(tmp_path: Path):
    args = parse_args(_argv(tmp_path, tmp_path / "o.parquet", "3"))
    assert args.limit == 3
    assert parse_args(_argv(tmp_path, tmp_path / "o.parquet", "1")).limit == 1
    assert parse_args(_argv(tmp_path, tmp_path / "o.parquet", "1")[:-2]).limit is None  # every record


def test_the_command_line_refuses_limit_zero(tmp_path: Path):
    fx = write_fixtures(tmp_path / "fx")
    out = tmp_path / "out" / "train.parquet"
    proc = subprocess.run([sys.executable, "-m", "soft_spatial.data.prepare", *_argv(fx.omnispatial, out, "0")],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr
    assert "argument --limit: must be an integer of at least 1" in proc.stderr
    assert "no record fits" not in proc.stderr  # what it said before: blaming --max-prompt-length
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("limit", ["0", "-1"])
def test_a_bad_limit_with_a_real_processor_is_refused_as_the_limit(tmp_path: Path, tiny_qwen3_vl_small: Path,
                                                                   capsys, limit: str):
    # before: "0" ended in "no record fits --max-prompt-length" after every step had run, "-1" wrote
    # every record but the last
    fx = write_fixtures(tmp_path / "fx")
    out = tmp_path / "out" / "train.parquet"
    argv = _argv(fx.omnispatial, out, limit)
    argv[argv.index("--processor") + 1] = str(tiny_qwen3_vl_small)
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    assert "argument --limit: must be an integer of at least 1" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
