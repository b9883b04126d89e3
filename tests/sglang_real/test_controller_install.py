"""The plugin's weight loader (engines/sglang/hooks.py::load_weights) installs the controller the
trainer sent and logs its fingerprint, the one the GPU kit's E jobs compare with what the trainer
sent (bench/gpu/grpo.py::check_sync). The E jobs themselves, training through verl with SGLang's
real engine on the CPU, run in tests/sglang_real/test_gpu_headline_dry_run.py."""
from __future__ import annotations

import os

import pytest
import torch

from soft_spatial.softthink import AdaptSoft
from soft_spatial.softthink.controller import FINGERPRINT_LOG_ENV, state_fingerprint

pytestmark = [pytest.mark.sglang]


def test_weight_loader_logs_the_controller_it_installed(tmp_path, monkeypatch):
    from soft_spatial.engines.sglang import hooks
    from soft_spatial.engines.sglang.client import CONTROLLER_NAME, encode_controller
    from soft_spatial.engines.sglang.runtime import SoftRuntime
    from soft_spatial.engines.sglang.server_args import SchedulerSetup
    from soft_spatial.softthink.settings import SoftSettings
    from soft_spatial.softthink import AdaptSoftConfig, SoftThinkingConfig

    sent = AdaptSoft(hidden_size=16)
    with torch.no_grad():
        for p in sent.parameters():
            p.add_(torch.randn_like(p))
    setup = SchedulerSetup(soft=SoftSettings(soft_thinking=SoftThinkingConfig(mode="adaptsoft"),
                                             adaptsoft=AdaptSoftConfig()), hidden_size=16, think_end_id=7,
                           banned_ids=[])
    monkeypatch.setattr(hooks, "_runtime", SoftRuntime(setup))
    monkeypatch.setenv(FINGERPRINT_LOG_ENV, str(tmp_path))
    hooks.load_weights(None, [(CONTROLLER_NAME, encode_controller(sent.to_state()))])
    logged = (tmp_path / f"rollout-{os.getpid()}.jsonl").read_text().splitlines()
    want = state_fingerprint(sent.state_dict())
    assert len(logged) == 1 and f'"sha256": "{want}"' in logged[0]
    assert state_fingerprint(hooks.runtime().controller.state_dict()) == want

