"""python -m soft_spatial.infra.one_process: several commands in one process, each as ``python -m``
runs it, its output in its own log; the first failure ends it. (The learning runner's warm starts
and gate evaluations through it, end to end: tests/e2e/test_softness_phase0.py; the same outputs
as separate processes: their keys and files are the commands' own.)"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from soft_spatial.infra.one_process import Run, command_line, parse

PROG = [sys.executable, "-m", "soft_spatial.infra.one_process"]
ROOT = Path(__file__).resolve().parents[2]


def test_the_command_line_round_trips_and_a_malformed_one_is_named():
    runs = [Run("json.tool", ("a.json",), Path("/l/a.log")), Run("json.tool", ("--sort-keys", "b"))]
    line = command_line(runs)
    assert line == ["--log", "/l/a.log", "-m", "json.tool", "a.json", "--next", "-m", "json.tool",
                    "--sort-keys", "b"]
    assert parse(line) == runs
    for bad in (["json.tool", "a"], ["--log"], ["-m", "json.tool", "--next"], []):
        with pytest.raises(ValueError, match="-m MODULE|--log needs"):
            parse(bad)


def test_each_runs_as_its_command_into_its_log_and_the_first_failure_ends_it(tmp_path):
    (tmp_path / "a.json").write_text('{"b": 1, "a": 2}')
    (tmp_path / "bad.json").write_text("{not json")
    logs = [tmp_path / "logs" / f"{n}.log" for n in ("a", "bad", "after")]
    ok = subprocess.run([*PROG, *command_line([
        Run("json.tool", ("--sort-keys", str(tmp_path / "a.json")), logs[0]),
        Run("json.tool", ("--compact", str(tmp_path / "a.json")))])],
        capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stderr
    # the first's output is in its log, after its command line; the second's (no log) is ours
    assert logs[0].read_text() == (f"\n$ {sys.executable} -m json.tool --sort-keys {tmp_path / 'a.json'}\n"
                                   + json.dumps({"a": 2, "b": 1}, indent=4) + "\n")
    assert ok.stdout == '{"b":1,"a":2}\n'

    failed = subprocess.run([*PROG, *command_line([
        Run("json.tool", (str(tmp_path / "a.json"),), logs[0]),
        Run("json.tool", (str(tmp_path / "bad.json"),), logs[1]),
        Run("json.tool", (str(tmp_path / "a.json"),), logs[2])])],
        capture_output=True, text=True, timeout=120)
    assert failed.returncode == 1 and failed.stdout == ""  # json.tool's SystemExit(error)
    assert "Expecting property name" in logs[1].read_text()  # as python -m json.tool prints it
    assert not logs[2].exists()  # the rest not run
    assert failed.stderr.endswith(f"python -m json.tool failed (exit 1; run 2 of 3, the rest not "
                                  f"run); log {logs[1]}\n")
    assert "Expecting property name" in failed.stderr  # the end of its log

    (tmp_path / "bad.b64").write_text("abc")
    raised = subprocess.run([*PROG, *command_line([
        Run("base64", ("-d", str(tmp_path / "bad.b64")), logs[2]),
        Run("json.tool", (str(tmp_path / "a.json"),))])], capture_output=True, text=True, timeout=120)
    assert raised.returncode == 1 and raised.stdout == ""  # an exception: its traceback, exit 1
    assert logs[2].read_text().rstrip().endswith("binascii.Error: Incorrect padding")
    assert "run 1 of 2, the rest not run" in raised.stderr

    refused = subprocess.run([*PROG, "json.tool"], capture_output=True, text=True, timeout=120)
    assert refused.returncode == 1 and refused.stderr.startswith(
        "python -m soft_spatial.infra.one_process: each run is")


SLOW = '''import sys, time
from pathlib import Path

from soft_spatial.infra.signals import command

def body():
    Path(sys.argv[1]).write_text("started")
    try:
        time.sleep(120)
    finally:
        Path(sys.argv[1] + ".cleanup").write_text("done")

if sys.argv[2] == "own":  # a command of the project: its own block
    with command("slow"):
        body()
else:
    body()
'''


@pytest.mark.parametrize("own", ["own", "bare"])
def test_sigterm_ends_the_running_command_as_it_ends_alone_and_the_rest_do_not_run(tmp_path, own):
    """SIGTERM (the learning runner's stop, through its tether) ends the running command, its
    cleanup run: its own `command` block ends it (exit 143), or this command's ends a module without
    one; the rest do not run; exit 143."""
    import os
    import signal
    import time

    (tmp_path / "slowmod.py").write_text(SLOW)
    marks = [tmp_path / "first", tmp_path / "second"]
    child = subprocess.Popen([*PROG, *command_line([Run("slowmod", (str(m), own)) for m in marks])],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
                             env=dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), str(ROOT)])))
    try:
        deadline = time.monotonic() + 60
        while not marks[0].exists():
            assert child.poll() is None and time.monotonic() < deadline, child.communicate()
            time.sleep(0.05)
        child.send_signal(signal.SIGTERM)
        _, err = child.communicate(timeout=60)
    finally:
        child.kill()
    assert child.returncode == 143, err
    assert (tmp_path / "first.cleanup").read_text() == "done" and not marks[1].exists()
    assert "Traceback" not in err
    if own == "own":
        assert err == ("slow: interrupted by SIGTERM\npython -m soft_spatial.infra.one_process: "
                       "python -m slowmod interrupted (exit 143; run 1 of 2, the rest not run)\n")
    else:
        assert err.startswith("python -m soft_spatial.infra.one_process: interrupted by SIGTERM")
