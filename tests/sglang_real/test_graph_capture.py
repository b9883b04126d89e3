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
    assert isinstance(cgr.CudaGraphRunner.__dict__["capture_hidden_mode"], compat.graphs._AtLeastLast)
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
    reason = got["first_eager"].pop("reason")
    assert got["first_eager"] == {"batch_size": 4, "max_bs": 64, "requested_hidden": 1,
                                  "captured_hidden": 0}
    assert reason.startswith("the batch asks for hidden states LAST, the graphs were captured "
                             "with NULL: they do not compute it")


def _last_runner(cgr, monkeypatch):
    """A runner whose graphs the plugin captured at LAST (the descriptor installed, as in every
    plugin process), with SGLang's ``capture`` replaced by a counter of recaptures."""
    from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode as M
    monkeypatch.delattr(cgr.CudaGraphRunner, "capture_hidden_mode", raising=False)
    compat.capture_graphs_with_last_hidden()
    r = object.__new__(cgr.CudaGraphRunner)
    r.capture_hidden_mode = M.NULL  # what __init__ does; the descriptor keeps LAST
    r = _with(cgr, r)
    r.model_runner.server_args = SimpleNamespace(enable_return_hidden_states=False)
    recaptures = []
    monkeypatch.setattr(cgr.CudaGraphRunner, "capture",
                        lambda self: recaptures.append(self.capture_hidden_mode))
    return r, recaptures


def test_a_batch_asking_for_no_hidden_states_replays_without_recapturing(cgr, monkeypatch):
    """SGLang's own ``recapture_if_needed`` on a NULL batch (speculative modes, any path that skips
    the plugin's hook): ``can_run`` accepts it, and before the fix every such batch recaptured
    every graph (NULL != the captured LAST); with ``recapture_only_above_last`` it replays the
    LAST graphs as they are, while a batch that needs more (FULL) still recaptures."""
    from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode as M
    monkeypatch.setattr(cgr.CudaGraphRunner, "recapture_if_needed",
                        cgr.CudaGraphRunner.recapture_if_needed)  # restored after the test
    r, recaptures = _last_runner(cgr, monkeypatch)
    assert cgr.CudaGraphRunner.can_run(r, _batch(M.NULL)) is True
    cgr.CudaGraphRunner.recapture_if_needed(r, _batch(M.NULL))  # SGLang alone: the hole
    assert recaptures == [M.LAST] and r.capture_hidden_mode == M.LAST
    recaptures.clear()

    compat.recapture_only_above_last()
    compat.recapture_only_above_last()  # idempotent: one wrapper
    assert not getattr(cgr.CudaGraphRunner.recapture_if_needed.__wrapped__,
                       "soft_spatial_floored", False)
    for mode in (M.NULL, None, M.LAST, M.NULL):
        batch = _batch(mode)
        cgr.CudaGraphRunner.recapture_if_needed(r, batch)
        assert batch.capture_hidden_mode == mode  # the batch is not modified
    assert recaptures == [] and r.capture_hidden_mode == M.LAST
    spec = _batch(M.NULL)
    spec.spec_info = SimpleNamespace(capture_hidden_mode=M.FULL)
    cgr.CudaGraphRunner.recapture_if_needed(r, spec)  # more than LAST: recaptured, kept at FULL
    assert recaptures == [M.FULL] and r.capture_hidden_mode == M.FULL


def test_every_eager_decode_batch_is_said_once_per_reason(cgr, monkeypatch):
    """The warning every plugin engine installs (``warn_eager_decodes``), through SGLang's own
    ``can_run``: one message per reason and process, naming it; replayed batches say nothing."""
    from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode as M
    monkeypatch.setattr(cgr.CudaGraphRunner, "can_run", cgr.CudaGraphRunner.can_run)
    said = []
    compat.warn_eager_decodes(said.append)
    compat.warn_eager_decodes(lambda m: pytest.fail("a second warner"))  # idempotent
    last, full = _runner(cgr, M.LAST), _runner(cgr, M.FULL)
    for _ in range(3):
        assert cgr.CudaGraphRunner.can_run(last, _batch(M.LAST)) is True
    assert said == []
    for bs in (65, 80, 128):
        assert cgr.CudaGraphRunner.can_run(last, _batch(M.LAST, bs=bs)) is False
    assert len(said) == 1 and "a batch of 65 rows is larger than the largest captured graph " \
        "(64 rows" in said[0] and "cuda_graph_max_bs" in said[0]
    for _ in range(2):  # what enable_return_hidden_states does to the plugin's batches
        assert cgr.CudaGraphRunner.can_run(full, _batch(M.LAST)) is False
    assert len(said) == 2 and "asks for hidden states LAST, the graphs were captured with " \
        "FULL: enable_return_hidden_states" in said[1]
    embeds = _batch(M.LAST)
    embeds.replace_embeds = object()
    assert cgr.CudaGraphRunner.can_run(last, embeds) is False
    assert len(said) == 3 and "replace_embeds" in said[2]
    assert all(m.startswith("CUDA graphs: a decode batch ran eagerly") for m in said)


def test_the_plugin_warns_in_every_engine_and_floors_the_recapture():
    import inspect

    from soft_spatial.engines.sglang import hooks
    src = inspect.getsource(hooks.install)
    assert "recapture_only_above_last()" in src and "warn_eager_decodes(logger.warning)" in src
