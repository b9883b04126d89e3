"""The GPU kit's stage e (soft_spatial/bench/gpu/grpo.py) on the CPU: the plugin's weight loader logs the
fingerprint of the controller it installed, and the stage's dry run — ``python -m
soft_spatial.train rollout=sglang experiment=adaptsoft`` to step 1 with a checkpoint, then a
resume to step 2, verl's trainer with SGLang's real engine as the rollout — passes its checks
(controller sent = installed at every sync and = the checkpoint, replay within 1e-3, the
controller's optimizer restored) with the same code a GPU runs.

It is also the suite's test of training through verl with the sglang_soft rollout on the CPU:
verl's Ray trainer and FSDP2/gloo worker, the SGLangSoftHttpServer launching SGLang's scheduler
with the plugin, verl's weight sync before every step (the server starts from dummy weights, so
the replay difference stays below 1e-3 only if the sync works: ~40 nats with a broken one) and the
controller's after it; spine match, soft steps, the controller trained every step, the n samples
of a prompt sharing its prefill, no process left behind — through a resume in between."""
from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import torch

from real_engine import BATCH_LOG_ENV, assert_marked_gone, assert_prefill_shared
from soft_spatial.softthink import AdaptSoft
from soft_spatial.softthink.controller import FINGERPRINT_LOG_ENV, state_fingerprint

pytestmark = [pytest.mark.sglang]
ROOT = Path(__file__).resolve().parents[2]


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


def _rows(report: str, key: str) -> list[list[str]]:
    return [[c.strip() for c in line.strip("|").split("|")]
            for line in report.splitlines() if line.startswith(f"| {key} ")]


@pytest.mark.slow
def test_stage_e_dry_run_trains_resumes_and_syncs_the_controller(tmp_path):
    out, mark = tmp_path / "report.md", uuid.uuid4().hex
    env = dict(os.environ, SGLANG_USE_CPU_ENGINE="1", SOFT_SPATIAL_TEST_MARK=mark,
               **{BATCH_LOG_ENV: str(tmp_path / "batches.jsonl")})
    res = subprocess.run([sys.executable, str(ROOT / "scripts/gpu/check.py"), "--dry-run",
                          "--stages", "e", "--out", str(out)], capture_output=True, text=True,
                         cwd=tmp_path, env=env, timeout=1800)
    report = out.read_text() if out.exists() else ""
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:] + report
    assert "## e. GRPO through verl" in report and "**ok**" in report
    # every sync: 0 and 1 in run 1, 1 (the checkpoint, resumed) and 2 in run 2, each installed
    sync = [r for r in (_rows(report, "1") + _rows(report, "2")) if len(r) == 6]
    assert [(r[0], r[1], r[4]) for r in sync] == [("1", "0", "yes"), ("1", "1", "yes"),
                                                  ("2", "1", "yes"), ("2", "2", "yes")]
    assert [r[5] for r in sync] == ["–", "yes", "yes", "–"]
    assert sync[1][2] == sync[2][2] != sync[0][2] and sync[3][2] not in (sync[0][2], sync[1][2])
    for key in ("soft/replay_max_abs_diff", "soft/replay_max_abs_diff_soft"):
        (row,) = _rows(report, key)  # key, the steps it covers, one value per step
        assert all(0 <= float(x) < 1e-3 for x in row[2:]), row
    assert "**Verdict: pass**" in report
    for key in ("timing_s/gen", "timing_s/old_log_prob", "timing_s/ref", "timing_s/update_actor",
                "timing_s/update_weights", "actor/adaptsoft/alignment_s"):
        (row,) = _rows(report, key)
        assert all(float(x) > 0 for x in row[2:]), row
    logs = sorted(p.name for p in (tmp_path / "stage-e").iterdir())
    assert {"train-run1.log", "train-run2.log", "metrics.jsonl"} <= set(logs)
    assert_prefill_shared(tmp_path / "batches.jsonl", prompts=2 * 2, n=2)  # 2 prompts, 2 steps
    assert_marked_gone(mark)
