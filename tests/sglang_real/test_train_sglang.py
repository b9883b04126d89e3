"""``python -m soft_spatial.train rollout=sglang cluster=cpu``: 2 AdaptSoft training steps through
verl's real trainer with SGLang 0.5.12's real engine as the rollout (see conftest.py).

What runs for real: verl's Ray trainer and FSDP2/gloo training worker; the ``sglang_soft``
replica, whose ``SGLangSoftHttpServer`` (verl's ``SGLangHttpServer``) launches SGLang's scheduler
and detokenizer processes with the plugin and serves verl's agent loop; verl's weight sync
(``ServerAdapter.update_weights`` → SGLang's ``weight_sync.update_weights`` → HTTP →
``update_weights_from_tensor`` in the scheduler) before every step, and the controller's
(``SGLangSoftServerAdapter.update_controller`` → the plugin's weight loader) after it. The CPU
accommodations are the test overlay's (tests/sglang_stubs/README.md): SGLang's sampler reset and
CPU tensors in SGLang's CUDA-IPC weight serialiser.

With the radix cache on (the default), the 2 samples of a prompt share its prefill (checked in the
scheduler's batch log). The server starts from dummy weights (verl's hybrid mode), so the per-step
likelihoods the trainer recomputes agree with SGLang's only if the weight sync works: with a broken sync the replay
difference was measured at ~40 (nats) on the first step; and with a learning rate of 1e-3 the
second step checks that the first step's update reached SGLang.
"""
from __future__ import annotations

import uuid

import pytest

from real_engine import BATCH_LOG_ENV, assert_marked_gone, assert_prefill_shared
from test_train_cpu import prepare_train_data, run_train

pytestmark = [pytest.mark.sglang, pytest.mark.slow]


def test_two_training_steps_with_the_sglang_rollout(tiny_qwen3_vl_small, tmp_path, monkeypatch):
    data = prepare_train_data(tmp_path / "data", tiny_qwen3_vl_small)
    mark = uuid.uuid4().hex
    monkeypatch.setenv("SOFT_SPATIAL_TEST_MARK", mark)  # finds every process the run starts
    monkeypatch.setenv(BATCH_LOG_ENV, str(tmp_path / "batches.jsonl"))  # the scheduler's batches
    metrics = run_train(tiny_qwen3_vl_small, data, tmp_path, "rollout=sglang",
                        "experiment=adaptsoft", "trainer.total_training_steps=2",
                        "trainer.save_freq=-1", "trainer.n_gpus_per_node=1",
                        "actor_rollout_ref.actor.optim.lr=1e-3",
                        "actor_rollout_ref.actor.optim.lr_warmup_steps_ratio=0")
    # the rollout ran on SGLang's scheduler: its batch log (a file the run writes, not a worker log
    # line forwarded by Ray, whose arrival depends on timing) is checked below
    assert [m["step"] for m in metrics] == [1, 2]
    for m in metrics:
        assert m["soft/spine_match_rate"] == 1.0  # records and responses agree
        assert m["soft/soft_step_fraction"] > 0
        assert m["soft/replay_max_abs_diff_soft"] < 1e-3  # SGLang's likelihoods = trainer's
        assert abs(m["rollout_corr/kl"]) < 1e-4
        assert m["actor/grad_norm"] > 0 and m["actor/adaptsoft/grad_finite"] == 1.0
        assert m["actor/adaptsoft/optimizer_steps"] == m["step"]  # the controller was trained
    assert_prefill_shared(tmp_path / "batches.jsonl", prompts=2 * 2, n=2)  # 2 prompts, 2 steps
    assert_marked_gone(mark)
