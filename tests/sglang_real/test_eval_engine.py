"""``python -m soft_spatial.eval engine=sglang`` on SGLang 0.5.12's REAL offline engine (CPU; see
conftest.py): the command a user runs, in its own process, on the OmniSpatial fixture (images,
2 samples per question), writes exactly the ``samples.jsonl`` that ``engine=local`` writes, and
leaves no process behind. Plus :class:`SGLangEngine`'s input checks (no engine needed)."""
from __future__ import annotations

import os
import subprocess
import sys
import uuid

import psutil
import pytest
from real_engine import CPU_SERVER_ARGS
from sglang_replay import ReplayEngine, ReplayTokenizerManager

from soft_spatial.data.fixtures import write_fixtures
from soft_spatial.engines.sglang.engine import SGLangEngine
from soft_spatial.eval import evaluate, read_results
from eval_helpers import make_cfg

pytestmark = pytest.mark.sglang


def test_eval_cli_on_sglang_matches_local(think_tiny, tmp_path):
    fixtures = write_fixtures(tmp_path / "fixtures")
    common = dict(benchmarks="[omnispatial]", mode="fixed", limit=3, samples=2, seed=3,
                  max_new_tokens=12, temperature=0.8)
    evaluate(make_cfg(fixtures, think_tiny, tmp_path / "local", **common), progress=False)

    mark = uuid.uuid4().hex  # finds the CLI's processes (it starts SGLang's) after it exits
    overrides = [f"data.omnispatial={fixtures.omnispatial}", f"model.path={think_tiny}",
                 f"output_dir={tmp_path / 'sglang'}", "engine=sglang"]
    overrides += [f"{k}={v}" for k, v in common.items()]
    overrides += [f"+sglang.{k}={v}" for k, v in CPU_SERVER_ARGS.items()
                  if k != "mem_fraction_static"]
    env = dict(os.environ, SOFT_SPATIAL_TEST_MARK=mark)
    out = subprocess.run([sys.executable, "-m", "soft_spatial.eval", *overrides], env=env,
                         capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    left = [p for p in psutil.process_iter()
            if _environ(p).get("SOFT_SPATIAL_TEST_MARK") == mark]
    assert not left, f"the eval command left processes behind: {left}"

    local = (tmp_path / "local" / "samples.jsonl").read_text()
    sglang = (tmp_path / "sglang" / "samples.jsonl").read_text()
    rows = read_results(tmp_path / "local" / "samples.jsonl")
    assert len(rows) == 6 and any(r["soft_steps"] for r in rows)
    assert any(r["think_closed"] for r in rows) or any(r["finish_reason"] == "stop"
                                                       for r in rows)
    assert sglang == local


def _environ(p):
    try:
        return p.environ()
    except (psutil.Error, OSError):
        return {}


def test_sglang_engine_checks_its_inputs(tiny_qwen3_vl, tmp_path):
    from soft_spatial.softthink import SoftThinkingConfig
    backend = ReplayEngine(ReplayTokenizerManager([], [], 1, lambda: None, None, []))
    with pytest.raises(ValueError, match="needs controller"):
        SGLangEngine(tiny_qwen3_vl, SoftThinkingConfig(mode="adaptsoft"), backend=backend)
    with pytest.raises(FileNotFoundError, match="missing.pt"):
        SGLangEngine(tiny_qwen3_vl, SoftThinkingConfig(mode="adaptsoft"),
                     controller=tmp_path / "missing.pt", backend=backend)
    engine = SGLangEngine(tiny_qwen3_vl, SoftThinkingConfig(mode="fixed"), backend=backend)
    with pytest.raises(ValueError, match="server-wide"):
        engine.generate([[1, 2]], soft_thinking=SoftThinkingConfig(mode="hard"))
    with pytest.raises(ValueError, match="image placeholder"):
        engine.generate([[1, 2, engine.image_token_id]])
    # an overlong prompt is refused before anything reaches SGLang, naming its index (evaluation
    # skips and counts it, tests/eval/test_main.py); the default limit is the context less the budget
    from soft_spatial.engines import PromptTooLongError
    from soft_spatial.softthink import SamplingConfig
    context = engine.context_length
    assert context and engine.prompt_limit(SamplingConfig(max_new_tokens=100)) == context - 100
    with pytest.raises(PromptTooLongError) as e:
        engine.generate([[1, 2], [1] * (context - 99)], sampling=SamplingConfig(max_new_tokens=100))
    assert (e.value.index, e.value.length, e.value.limit) == (1, context - 99, context - 100)
    short = SGLangEngine(tiny_qwen3_vl, SoftThinkingConfig(mode="fixed"), backend=backend,
                         max_prompt_length=3)
    with pytest.raises(PromptTooLongError, match="prompt 0 is too long: 4 tokens > 3"):
        short.generate([[1, 2, 3, 4]])
