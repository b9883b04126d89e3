"""``python -m soft_spatial.eval engine=sglang`` (:class:`SGLangEngine`) on SGLang's real request
and output classes (see conftest.py and sglang_replay.py): for the same logits, an AdaptSoft
evaluation with images writes exactly the local engine's per-sample rows."""
from __future__ import annotations

import pytest
from sglang_replay import ReplayEngine, ReplayTokenizerManager

from controller_helpers import trained_controller
from engine_spy import capture_local
from soft_spatial.data.fixtures import write_fixtures
from soft_spatial.engines import LocalEngine
from soft_spatial.engines.local import row_seed
from soft_spatial.engines.sglang.client import PARAM_KEY
from soft_spatial.engines.sglang.engine import SGLangEngine
from soft_spatial.engines.sglang.runtime import SoftRuntime
from soft_spatial.eval import evaluate, read_results
from test_eval import make_cfg

pytestmark = pytest.mark.sglang


def test_sglang_eval_matches_local_eval(tiny_qwen3_vl, tmp_path, monkeypatch):
    fixtures = write_fixtures(tmp_path / "fixtures")
    ckpt = tmp_path / "adaptsoft.pt"
    trained_controller(64, seed=4).save(ckpt)
    common = dict(benchmarks="[omnispatial]", mode="adaptsoft", controller=ckpt, limit=2,
                  samples=2, batch_rows=64)
    cfg_local = make_cfg(fixtures, tiny_qwen3_vl, tmp_path / "local", **common)
    cfg_sglang = make_cfg(fixtures, tiny_qwen3_vl, tmp_path / "sglang", engine="sglang",
                          **common)
    assert cfg_sglang.engine == "sglang" and cfg_sglang.sglang["mem_fraction_static"] == 0.4

    local = LocalEngine.from_pretrained(tiny_qwen3_vl, controller=ckpt)
    with monkeypatch.context() as mp:
        steps, mixes = capture_local(mp)
        evaluate(cfg_local, engine=local, progress=False)

    runtime = {}
    tm = ReplayTokenizerManager(steps, mixes, 4, lambda: runtime["rt"], local.embed,
                                local.eos_ids, interval=2)
    backend = ReplayEngine(tm)
    engine = SGLangEngine(tiny_qwen3_vl, cfg_sglang.soft, controller=ckpt, seed=cfg_sglang.seed,
                          backend=backend)
    assert engine.eos_ids == local.eos_ids
    assert engine.settings.banned_ids == local.banned_ids.tolist()
    runtime["rt"] = SoftRuntime(engine.settings)  # loads the checkpoint like a scheduler does
    for k, v in local.controller.state_dict().items():
        assert (runtime["rt"].controller.state_dict()[k] == v).all(), k
    evaluate(cfg_sglang, engine=engine, progress=False)

    (call,) = backend.calls  # one batch: 2 questions × 2 samples, with their images
    assert all(images for images in call["image_data"])
    seeds = [p["custom_params"][PARAM_KEY]["seed"] for p in call["sampling_params"]]
    assert seeds == [row_seed(cfg_sglang.seed + i, j) for i in range(2) for j in range(2)]
    rows_local = read_results(tmp_path / "local" / "samples.jsonl")
    rows_sglang = read_results(tmp_path / "sglang" / "samples.jsonl")
    assert len(rows_local) == 4 and rows_sglang == rows_local
    assert any(r["soft_steps"] > 0 for r in rows_local)
    assert len(engine._traces) == 0


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
        engine.generate([[1, 2]], soft=SoftThinkingConfig(mode="hard"))
    with pytest.raises(ValueError, match="image placeholder"):
        engine.generate([[1, 2, engine.image_token_id]])
