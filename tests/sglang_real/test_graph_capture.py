"""CUDA graphs and the soft plugin's hidden states, against SGLang 0.5.12's own ``CudaGraphRunner``
code (no graph can be captured on a CPU, so the runner is a bare instance with the attributes
``can_run`` reads): a runner captured with NULL refuses every batch that asks for LAST (what the
H200 run of 2026-11-26 measured: the plugin at graphs-off speed), the plugin's capture wrapper
raises the captured mode to LAST so those batches replay, and the scheduler-side counts record
which batches replayed and why the first eager one did not."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from soft_spatial.compat import sglang as compat

pytestmark = pytest.mark.sglang


@pytest.fixture
def cgr():
    from sglang.srt.model_executor import cuda_graph_runner
    return cuda_graph_runner


def _runner(cgr, captured):
    r = object.__new__(cgr.CudaGraphRunner)
    r.__dict__.update(require_mlp_tp_gather=False, enable_pdmux=False, disable_padding=False,
                      max_bs=64, graphs={}, require_mlp_sync=False, is_encoder_decoder=False,
                      enable_two_batch_overlap=False, capture_hidden_mode=captured,
                      model_runner=SimpleNamespace(spec_algorithm=SimpleNamespace(
                          is_ngram=lambda: False)),
                      _resolve_lora_variant=lambda fb: None, _make_graph_key=lambda *a: a)
    return r


def _batch(mode, bs=8):
    return SimpleNamespace(replace_embeds=None, batch_size=bs, capture_hidden_mode=mode,
                           spec_info=None, encoder_lens=None)


def test_a_runner_captured_with_null_never_replays_a_batch_asking_for_last(cgr):
    from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode as M
    assert cgr.CudaGraphRunner.can_run(_runner(cgr, M.NULL), _batch(M.NULL)) is True
    assert cgr.CudaGraphRunner.can_run(_runner(cgr, M.NULL), _batch(M.LAST)) is False
    assert cgr.CudaGraphRunner.can_run(_runner(cgr, M.LAST), _batch(M.LAST)) is True
    assert cgr.CudaGraphRunner.can_run(_runner(cgr, M.LAST), _batch(M.NULL)) is True
    assert cgr.CudaGraphRunner.can_run(_runner(cgr, M.LAST), _batch(M.LAST, bs=65)) is False


def test_the_plugins_capture_wrapper_captures_with_last(cgr, monkeypatch):
    from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode as M
    seen = []
    monkeypatch.setattr(cgr.CudaGraphRunner, "capture", lambda self: seen.append(
        self.capture_hidden_mode))
    compat.capture_graphs_with_last_hidden()
    compat.capture_graphs_with_last_hidden()  # idempotent: wrapped once
    assert cgr.CudaGraphRunner.capture.__wrapped__.__name__ == "<lambda>"
    for start, want in ((M.NULL, M.LAST), (M.LAST, M.LAST), (M.FULL, M.FULL)):
        r = _runner(cgr, start)
        r.capture()
        assert seen[-1] == want and r.capture_hidden_mode == want
    assert cgr.CudaGraphRunner.can_run(_runner(cgr, M.NULL), _batch(M.LAST)) is False
    r = _runner(cgr, M.NULL)
    r.capture()  # the start-up capture, wrapped
    assert cgr.CudaGraphRunner.can_run(r, _batch(M.LAST)) is True


def test_the_plugin_installs_the_capture_wrapper():
    import inspect

    from soft_spatial.engines.sglang import hooks
    assert "capture_graphs_with_last_hidden()" in inspect.getsource(hooks.install)


def test_graph_decisions_are_counted_per_scheduler_process(cgr, monkeypatch, tmp_path):
    from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode as M
    monkeypatch.setattr(cgr.CudaGraphRunner, "can_run", cgr.CudaGraphRunner.can_run)
    compat.log_graph_decisions(str(tmp_path))
    compat.log_graph_decisions(str(tmp_path))  # idempotent
    null, last = _runner(cgr, M.NULL), _runner(cgr, M.LAST)
    for _ in range(20):
        assert cgr.CudaGraphRunner.can_run(last, _batch(M.LAST)) is True
    for _ in range(12):
        assert cgr.CudaGraphRunner.can_run(null, _batch(M.LAST, bs=4)) is False
    got = compat.read_graph_log(str(tmp_path))
    assert got["processes"] == 1
    assert (got["replayed"], got["eager"]) == (20, 12)  # 32 batches: written at 16 and 32
    assert got["first_eager"] == {"batch_size": 4, "max_bs": 64, "requested_hidden": 1,
                                  "captured_hidden": 0}
