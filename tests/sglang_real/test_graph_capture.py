"""CUDA graphs and the soft plugin's hidden states, against SGLang 0.5.12's own ``CudaGraphRunner``
code (no graph can be captured on a CPU, so the runner is a bare instance with the attributes
``can_run`` reads): a runner captured with NULL refuses every batch that asks for LAST (what the
H200 runs of 2026-11-26 measured: the plugin at graphs-off speed), SGLang's own per-batch-size
reset (run from its source) lowers any mode but FULL back to NULL, the plugin's descriptor keeps
LAST through it so those batches replay, and the scheduler-side counts record
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


def _upstream_mode_reset(cgr):
    """SGLang's own statement in ``capture_one_batch_size`` that sets the mode before each batch
    size's capture (``if self.capture_hidden_mode != FULL: self.capture_hidden_mode = ...``),
    compiled from its source: the line that undid the first fix."""
    import ast
    import inspect
    import textwrap
    tree = ast.parse(textwrap.dedent(inspect.getsource(cgr.CudaGraphRunner.capture_one_batch_size)))
    found = [n for n in ast.walk(tree) if isinstance(n, ast.If)
             and "self.capture_hidden_mode != CaptureHiddenMode.FULL" in ast.unparse(n.test)]
    assert len(found) == 1, "sglang's capture_one_batch_size no longer resets the hidden mode"
    return compile(ast.Module(body=found, type_ignores=[]), "capture_one_batch_size", "exec")


def test_the_plugins_capture_mode_survives_every_reset(cgr, monkeypatch):
    from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode as M
    monkeypatch.delattr(cgr.CudaGraphRunner, "capture_hidden_mode", raising=False)
    reset = _upstream_mode_reset(cgr)

    def captured(start, spec_mode=None):
        r = object.__new__(cgr.CudaGraphRunner)
        r.capture_hidden_mode = start  # what __init__ does (NULL, or FULL)
        spec = None if spec_mode is None else SimpleNamespace(capture_hidden_mode=spec_mode)
        exec(reset, {"CaptureHiddenMode": M}, {"self": r, "spec_info": spec})
        return r

    # SGLang alone: every capture is NULL whatever the runner started with (unless FULL)
    assert captured(M.LAST).capture_hidden_mode == M.NULL
    assert cgr.CudaGraphRunner.can_run(_with(cgr, captured(M.NULL)), _batch(M.LAST)) is False
    compat.capture_graphs_with_last_hidden()
    compat.capture_graphs_with_last_hidden()  # idempotent: one descriptor
    assert isinstance(cgr.CudaGraphRunner.__dict__["capture_hidden_mode"], compat._AtLeastLast)
    for start, spec_mode, want in ((M.NULL, None, M.LAST), (M.LAST, None, M.LAST),
                                   (M.FULL, None, M.FULL), (M.NULL, M.FULL, M.FULL),
                                   (M.NULL, M.NULL, M.LAST)):
        r = captured(start, spec_mode)
        assert r.capture_hidden_mode == want and type(r.capture_hidden_mode) is M
    r = _with(cgr, captured(M.NULL))
    assert cgr.CudaGraphRunner.can_run(r, _batch(M.LAST)) is True
    assert cgr.CudaGraphRunner.can_run(r, _batch(M.NULL)) is True
    # and SGLang's recapture check, given a LAST batch, finds nothing to recapture
    monkeypatch.setattr(cgr.CudaGraphRunner, "capture", lambda self: pytest.fail("recaptured"))
    r.model_runner = SimpleNamespace(server_args=SimpleNamespace(enable_return_hidden_states=False))
    cgr.CudaGraphRunner.recapture_if_needed(r, _batch(M.LAST))
    assert r.capture_hidden_mode == M.LAST


def _with(cgr, r):
    """``r`` with the attributes ``can_run`` reads (its mode kept as set)."""
    mode = r.__dict__["capture_hidden_mode"]
    r.__dict__.update(_runner(cgr, mode).__dict__)
    return r


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
