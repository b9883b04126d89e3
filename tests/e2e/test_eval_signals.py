"""``python -m soft_spatial.eval`` interrupted by a real signal (SIGTERM: Slurm, ``timeout``,
``kill``) after its first answer: the command exits 128 + the signal with one line
saying so and no traceback, the output directory keeps only whole result lines and no lock, and the
same command (its lock released) resumes to the result of an uninterrupted run. The child stops at a barrier
(``tests/support/barrier.py``, after its first answer is extracted) until the test has signalled it."""
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import barrier  # noqa: E402

from soft_spatial.data.fixtures import write_fixtures  # noqa: E402
from soft_spatial.eval import read_results  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def _cmd(fx, model, out):
    return [sys.executable, "-m", "soft_spatial.eval", "benchmarks=[mindcube]",
            f"data.mindcube={fx.mindcube}", f"model.path={model}", "mode=fixed", "samples=1",
            "max_new_tokens=8", "limit=4", "batch_rows=1", f"output_dir={out}"]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory, tiny_qwen3_vl_small):
    """The fixtures and the samples of the same command's settings run without a signal (in this
    process, as the command composes and evaluates them: its own start is what the test runs)."""
    from hydra import compose, initialize_config_dir

    from soft_spatial.eval import evaluate
    from soft_spatial.eval.__main__ import CONFIG_DIR, build_config

    root = tmp_path_factory.mktemp("eval_signals")
    fx = write_fixtures(root / "fixtures")
    cmd = _cmd(fx, tiny_qwen3_vl_small, root / "whole")
    assert cmd[1:3] == ["-m", "soft_spatial.eval"]
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
        evaluate(build_config(compose(config_name="eval", overrides=cmd[3:])))
    return fx, root / "whole"


# SIGTERM only: SIGINT takes the same way out (Terminated is a KeyboardInterrupt:
# tests/infra/test_signals.py), and reaches a real command's clean-up in the prepare and export
# signal tests
@pytest.mark.parametrize("sig", [signal.SIGTERM], ids=["SIGTERM"])
def test_a_signal_ends_evaluation_cleanly_and_the_same_command_resumes(
        tmp_path, tiny_qwen3_vl_small, uninterrupted, sig):
    fx, whole = uninterrupted
    out = tmp_path / "out"
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    gate = tmp_path / "gate"
    proc = subprocess.Popen(_cmd(fx, tiny_qwen3_vl_small, out), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=ROOT,
                            env=barrier.arm(gate, "soft_spatial.eval.runner:extract_answer",
                                            site=True) | {"HF_HUB_OFFLINE": "1"})
    try:
        assert barrier.wait_reached(gate, proc) == proc.pid
        barrier.interrupt(proc, sig)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()
    partial = read_results(out / "samples.jsonl") if (out / "samples.jsonl").exists() else []
    assert len(partial) < 4  # stopped inside the run, whole lines only
    res = subprocess.run(_cmd(fx, tiny_qwen3_vl_small, out), capture_output=True, text=True,
                         cwd=ROOT, env=env, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    key = lambda r: (r["question_key"], r["sample"])  # noqa: E731
    got = sorted(read_results(out / "samples.jsonl"), key=key)
    want = sorted(read_results(whole / "samples.jsonl"), key=key)
    assert [(key(r), r["text"]) for r in got] == [(key(r), r["text"]) for r in want]
