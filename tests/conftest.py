"""Shared pytest fixtures (CPU, offline).

Tiny random model directories, built once per test session under pytest's temporary directory with
`soft_spatial.models.build_tiny_model` (seed 0, fp32 weights). Each fixture returns the directory as
a `pathlib.Path`; load it with `soft_spatial.models.load_model(path)` or any `from_pretrained`.
Treat the directories as read-only: they are shared by every test of the session.

* `tiny_qwen3_vl`: Qwen3-VL, the real Qwen vocabulary (151,669 tokens, 151,936 logit rows, ~20M
  parameters; `<|image_pad|>` = 151655, `</think>` = 151668). Decode steps cost ~7 ms.
* `tiny_qwen3_vl_small`: Qwen3-VL with the small test vocabulary (512 BPE tokens + the 26 Qwen added
  tokens at 512..537; 576 logit rows, so rows 538..575 have no token). The fastest VL model.
* `tiny_qwen2_5_vl`: Qwen2.5-VL, the real Qwen vocabulary.
* `tiny_qwen3_text_small`: text-only Qwen3ForCausalLM, small vocabulary, no processor.
* `tiny_paths_model`: Qwen3-VL (hidden 32) whose small BPE is trained on the synthetic path tasks'
  words, the 36 cell names added as whole tokens (what `lab.learning budget=paths` builds, smaller).

The synthetic benchmark files of `soft_spatial.data.fixtures` (a `FixtureSet`):

* `fixture_set`: written once per session; read-only (copy a benchmark before changing a file).
* `fx`: a fresh copy for one test, under its `tmp_path`, to edit at will.
* `train_parquet`: the OmniSpatial fixture as one verl parquet for `tiny_qwen3_vl_small`'s processor,
  written once per session; read-only.

All have hidden size 64, 2 layers, a Qwen3-VL-Thinking style chat template (the generation prompt
ends with `<|im_start|>assistant\\n<think>\\n`) and eos ids [`<|im_end|>`, `<|endoftext|>`].

`eval_dir`: an evaluation directory whose 12 traces have known τ, Ĥ and correctness
(tests/support/analysis_helpers.py), written for one test; `(directory, truth)`.

`short_temp_dir`: a fresh directory with a short path under /tmp for a test's Ray cluster
(`--temp-dir`), removed after the test.
"""

from __future__ import annotations

import os
import shutil
import signal
import tempfile

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

# A suite started as a background job (`bash scripts/test.sh &`, `nohup ... &`) inherits SIGINT
# ignored, and so would every command a test starts: the tests that end a command with Ctrl-C
# (SIGINT) would see it ignored. SIGINT gets its default back here, for this process and the
# commands it starts (exec resets a handled signal to its default).
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def _build(tmp_path_factory, name: str, **kwargs):
    from soft_spatial.models import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp(name), **kwargs)


@pytest.fixture(scope="session")
def tiny_qwen3_vl(tmp_path_factory):
    """Tiny Qwen3-VL with the real Qwen vocabulary (see module docstring)."""
    return _build(tmp_path_factory, "tiny_qwen3_vl", family="qwen3_vl", vocab="qwen")


@pytest.fixture(scope="session")
def tiny_qwen3_vl_small(tmp_path_factory):
    """Tiny Qwen3-VL with the small test vocabulary (see module docstring)."""
    return _build(tmp_path_factory, "tiny_qwen3_vl_small", family="qwen3_vl", vocab="small")


@pytest.fixture(scope="session")
def tiny_qwen2_5_vl(tmp_path_factory):
    """Tiny Qwen2.5-VL with the real Qwen vocabulary (see module docstring)."""
    return _build(tmp_path_factory, "tiny_qwen2_5_vl", family="qwen2_5_vl", vocab="qwen")


@pytest.fixture(scope="session")
def tiny_qwen3_text_small(tmp_path_factory):
    """Tiny text-only Qwen3 causal LM with the small test vocabulary (see module docstring)."""
    return _build(tmp_path_factory, "tiny_qwen3_text_small", family="qwen3", vocab="small")


@pytest.fixture(scope="session")
def tiny_paths_model(tmp_path_factory):
    """Tiny Qwen3-VL for the path tasks (see module docstring)."""
    from soft_spatial.data.prompt import SYSTEM_PROMPT
    from soft_spatial.data.synthetic import PATH_TASKS, corpus, path_phrases

    return _build(tmp_path_factory, "tiny_paths_model", family="qwen3_vl", vocab="small",
                  corpus=corpus(tasks=PATH_TASKS), bpe_size=640,
                  phrases=[SYSTEM_PROMPT, *path_phrases(PATH_TASKS)], hidden_size=32,
                  intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                  num_key_value_heads=1, head_dim=16,
                  vision_config={"hidden_size": 16, "intermediate_size": 32, "depth": 1,
                                 "out_hidden_size": 32})


@pytest.fixture(scope="session")
def fixture_set(tmp_path_factory):
    """The synthetic benchmarks, shared by the session: read-only (see module docstring)."""
    from soft_spatial.data.fixtures import write_fixtures

    return write_fixtures(tmp_path_factory.mktemp("fixture_set"))


@pytest.fixture()
def fx(tmp_path):
    """The synthetic benchmarks, written for this test alone under ``tmp_path/fixtures``."""
    from soft_spatial.data.fixtures import write_fixtures

    return write_fixtures(tmp_path / "fixtures")


@pytest.fixture(scope="session")
def train_parquet(tmp_path_factory, tiny_qwen3_vl_small):
    """The OmniSpatial fixture as verl parquet, shared by the session: read-only (see module docstring)."""
    from transformers import AutoProcessor

    from soft_spatial.data import load_benchmark
    from soft_spatial.data.fixtures import write_fixtures
    from soft_spatial.data.prepare import write_parquet

    root = tmp_path_factory.mktemp("stats")
    fx = write_fixtures(root / "fixtures")
    out = root / "train.parquet"
    proc = AutoProcessor.from_pretrained(str(tiny_qwen3_vl_small), local_files_only=True)
    write_parquet(load_benchmark("omnispatial", fx.omnispatial), out, proc, progress=False)
    return out


@pytest.fixture(scope="module")
def process_group():
    """A 1-process gloo group on verl's CPU platform (for the real FSDP engines), per module."""
    import tempfile

    import torch.distributed as dist

    from soft_spatial.integration.platform import init_process_group, use_cpu_platform

    use_cpu_platform()
    created = not dist.is_initialized()
    if created:
        fd, path = tempfile.mkstemp()
        os.close(fd)
        os.remove(path)
        init_process_group(0, 1, "file://" + path)
    yield
    if created:
        dist.destroy_process_group()


@pytest.fixture
def short_temp_dir():
    # Ray's unix sockets live under --temp-dir: keep the path short (108-byte socket path limit).
    path = tempfile.mkdtemp(prefix="ssr-", dir="/tmp")
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture()
def eval_dir(tmp_path, tiny_qwen3_vl_small):
    """An evaluation directory with 12 traces: τ falls with Ĥ plus noise; lengths 6..50."""
    from analysis_helpers import write_eval_dir

    return write_eval_dir(tmp_path, tiny_qwen3_vl_small)
