"""``python -m soft_spatial.data.prepare`` interrupted by a real signal (SIGTERM: Slurm, ``timeout``,
``kill``; SIGINT: Ctrl-C) while it writes: the hidden temporary beside the output is removed, a
previous output is kept byte for byte, and the command exits 128 + the signal with one line
saying so. The child stops inside the write (``tests/support/barrier.py``, after its first image is
decoded) until the test has signalled it; no sleeping."""
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import barrier  # noqa: E402

from soft_spatial.data.fixtures import write_fixtures  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_during_prepare_removes_its_temporary_and_keeps_the_previous_output(
        tmp_path, tiny_qwen3_vl_small, sig):
    fx = write_fixtures(tmp_path / "fixtures")
    data = tmp_path / "data"
    data.mkdir()
    out = data / "train.parquet"
    out.write_bytes(b"the previous output")
    gate = tmp_path / "gate"
    env = barrier.arm(gate, "soft_spatial.data.images:open_rgb", site=True)
    proc = subprocess.Popen(
        [sys.executable, "-m", "soft_spatial.data.prepare", "--benchmark", "omnispatial",
         "--root", str(fx.omnispatial), "--out", str(out), "--processor", str(tiny_qwen3_vl_small)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env)
    try:
        assert barrier.wait_reached(gate, proc) == proc.pid
        temporaries = [p.name for p in data.iterdir() if p.name.startswith(".train.parquet.")]
        assert len(temporaries) == 1 and temporaries[0].endswith(".tmp")  # inside the write
        barrier.interrupt(proc, sig)
        assert sorted(p.name for p in data.iterdir()) == ["train.parquet"]  # no temporary left
        assert out.read_bytes() == b"the previous output"
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()
