"""``python -m soft_spatial.export`` on a real verl FSDP checkpoint (verl's own engine saved it):
shards load weights-only (a shard that would run code is refused, naming it, before any of it
runs) and the merged weights are the model's. Every export here is the real command in a child
process. (One export per output, and SIGTERM, SIGINT and SIGHUP ending the merger with the export
and leaving no ``OUT.partial``: tests/e2e/test_lifetime.py, its merger a stand-in.)"""
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from eval_helpers import tree  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]

BUILD = textwrap.dedent("""
    import os, sys, tempfile
    from soft_spatial.integration.platform import init_process_group, use_cpu_platform
    from soft_spatial_bench.workloads import make_train_engine

    model, out = sys.argv[1], sys.argv[2]
    use_cpu_platform()
    fd, init = tempfile.mkstemp()
    os.close(fd)
    os.remove(init)
    init_process_group(0, 1, "file://" + init)
    engine = make_train_engine(model, model_type="language_model")
    engine.save_checkpoint(os.path.join(out, "global_step_1", "actor"), global_step=1)
    with open(os.path.join(out, "latest_checkpointed_iteration.txt"), "w") as f:
        f.write("1")
""")


@pytest.fixture(scope="module")
def real_checkpoint(tmp_path_factory, tiny_qwen3_text_small):
    """A trainer directory whose step 1 verl's FSDP2 engine saved (DTensor shards, its device mesh,
    ``fsdp_config.json``, ``huggingface/``), from the tiny model's weights."""
    out = tmp_path_factory.mktemp("real_ckpt") / "ckpt"
    res = subprocess.run([sys.executable, "-c", BUILD, str(tiny_qwen3_text_small), str(out)],
                         capture_output=True, text=True, timeout=600, cwd=ROOT,
                         env=dict(os.environ, HF_HUB_OFFLINE="1"))
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    return out


@pytest.fixture()
def ckpt(real_checkpoint, tmp_path):
    return Path(shutil.copytree(real_checkpoint, tmp_path / "run" / "ckpt"))


def shard(ckpt: Path) -> Path:
    return ckpt / "global_step_1" / "actor" / "model_world_size_1_rank_0.pt"


def _env(**extra):
    return dict(os.environ, HF_HUB_OFFLINE="1", **extra)


def export_cmd(ckpt, out, *args):
    return [sys.executable, "-m", "soft_spatial.export", str(ckpt), str(out), *args]


def test_a_real_checkpoint_exports_its_weights(ckpt, tmp_path, tiny_qwen3_text_small):
    """The DTensor shards of verl's engine load weights-only (torch allow-lists DTensor, its
    placements and device mesh); the merged weights are the model's (bf16, as verl merges)."""
    from safetensors.torch import load_file

    out = tmp_path / "export"
    res = subprocess.run(export_cmd(ckpt, out), capture_output=True, text=True, timeout=600,
                         cwd=ROOT, env=_env())
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert json.loads((out / "config.json").read_text())["model_type"] == "qwen3"
    merged = {k: v for f in sorted(out.glob("*.safetensors")) for k, v in load_file(f).items()}
    original = load_file(tiny_qwen3_text_small / "model.safetensors")
    assert set(original) - set(merged) <= {"lm_head.weight"}  # tied to the embeddings
    for key, value in merged.items():
        torch.testing.assert_close(value, original[key].to(torch.bfloat16), rtol=0, atol=0)
    assert not (tmp_path / "export.partial").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".export")]  # no lock left


HOSTILE = textwrap.dedent("""
    import sys, torch
    import torch.distributed.tensor  # DTensor shards

    class Payload:  # what a checkpoint from elsewhere could hold: unpickling it runs code
        def __reduce__(self):
            return (exec, ("open(%r, 'w').write('ran')" % sys.argv[2],))

    state = torch.load(sys.argv[1], weights_only=True)
    state["payload"] = Payload()
    torch.save(state, sys.argv[1])
""")


def test_a_shard_that_would_run_code_is_refused_naming_it_and_runs_nothing(ckpt, tmp_path):
    target = shard(ckpt)
    marker = tmp_path / "code-ran"
    subprocess.run([sys.executable, "-c", HOSTILE, str(target), str(marker)], check=True, cwd=ROOT)
    before = tree(tmp_path)
    out = tmp_path / "export"
    res = subprocess.run(export_cmd(ckpt, out), capture_output=True, text=True, timeout=600,
                         cwd=ROOT, env=_env())
    assert not marker.exists(), "unpickling the shard ran its code"
    assert res.returncode != 0
    last = res.stderr.strip().splitlines()[-1]
    assert str(target) in last and "refused" in last and "would run code" in last, res.stderr[-3000:]
    assert "Traceback" not in res.stderr
    assert tree(tmp_path) == before  # no OUT, no OUT.partial, the run untouched
