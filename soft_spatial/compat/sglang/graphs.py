"""SGLang's CUDA graphs with the soft plugin (sglang 0.5.12,
``model_executor/cuda_graph_runner.py``, class ``CudaGraphRunner``): captured with the last hidden
state, not recaptured for a batch asking for none, eager batches said (and counted:
:mod:`.graph_log`). Imports sglang only inside functions."""
from __future__ import annotations

from collections.abc import Callable

from soft_spatial.compat.sglang.checks import missing

__all__ = ["capture_graphs_with_last_hidden", "recapture_only_above_last", "eager_reason",
           "warn_eager_decodes", "can_run_observers", "problems"]


class _AtLeastLast:
    """Data descriptor for ``CudaGraphRunner.capture_hidden_mode``: every assignment keeps at
    least ``CaptureHiddenMode.LAST`` (FULL is kept); the value lives in the instance's own
    ``__dict__`` under the same name, so reads see exactly what was stored."""

    def __init__(self, last):
        self.last = last

    def __get__(self, obj, owner=None):
        if obj is None:
            return self
        return obj.__dict__["capture_hidden_mode"]

    def __set__(self, obj, value):
        obj.__dict__["capture_hidden_mode"] = max(value, self.last)


def capture_graphs_with_last_hidden() -> None:
    """Make every ``CudaGraphRunner`` capture its decode graphs with (at least)
    ``CaptureHiddenMode.LAST``, so decode batches that ask for the last hidden state (the soft
    plugin asks in every batch: AdaptSoft's input) replay a graph. Idempotent.

    sglang 0.5.12: ``CudaGraphRunner.__init__`` sets ``capture_hidden_mode = NULL`` (L641) and
    captures (L736); ``capture_one_batch_size`` sets it again, to NULL unless FULL, before each
    batch size's forward (L1052-L1055) and captures that forward with it (L1109); ``can_run``
    (L802-L814) refuses a batch whose requested mode is neither NULL nor the captured one; the
    recapture for a new mode (``recapture_if_needed``, L1201) runs only inside
    ``replay_prepare``, i.e. after ``can_run`` said yes. So no decode batch that asks for LAST
    ever replays a graph: the plugin's decode ran eagerly on the H200 (2026-11-26, two calls:
    0.147 x and 0.172 x stock SGLang with "graphs on", 0 of 752 batches replayed).

    This installs :class:`_AtLeastLast` as the class's ``capture_hidden_mode``: every one of
    those assignments keeps LAST (FULL is kept), so the graphs are captured computing the last
    hidden state and a batch asking for NULL or LAST replays. (A first fix wrapped ``capture``
    to raise the mode before it; ``capture_one_batch_size`` lowered it again: the second H200
    call counted ``captured_hidden`` 0.) Only processes that install the plugin are affected.
    """
    from sglang.srt.model_executor.cuda_graph_runner import CudaGraphRunner
    from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode

    if isinstance(CudaGraphRunner.__dict__.get("capture_hidden_mode"), _AtLeastLast):
        return
    CudaGraphRunner.capture_hidden_mode = _AtLeastLast(CaptureHiddenMode.LAST)


class _FlooredBatch:
    """A forward batch as ``recapture_if_needed`` reads it: every attribute the batch's own but
    the requested hidden-state mode, floored at ``floor`` (None counts as NULL)."""

    __slots__ = ("_batch", "capture_hidden_mode")

    def __init__(self, batch, floor):
        mode = batch.capture_hidden_mode
        self._batch = batch
        self.capture_hidden_mode = floor if mode is None or mode < floor else mode

    def __getattr__(self, name):
        return getattr(self._batch, name)


def recapture_only_above_last() -> None:
    """Make ``CudaGraphRunner.recapture_if_needed`` compare the graphs' mode with the batch's
    requested hidden-state mode floored at ``CaptureHiddenMode.LAST``: a batch asking for NULL
    (speculative modes, any path that skips the plugin's hook) replays the LAST graphs, which
    compute what it asks and more; a batch asking for FULL still recaptures. Idempotent.

    sglang 0.5.12: ``recapture_if_needed`` (L1201, called by ``replay_prepare`` for every batch
    that ``can_run`` accepted) recaptures every graph when ``self.capture_hidden_mode`` differs from
    the largest mode the batch, its ``spec_info`` and ``enable_return_hidden_states`` require.
    ``can_run`` accepts a NULL batch whatever the captured mode; with the graphs held at LAST
    (:func:`capture_graphs_with_last_hidden`) every such batch compared NULL with LAST and
    re-captured all graphs (the descriptor keeps the new mode at LAST, so the next NULL batch did
    it again). The batch itself is not modified.
    """
    from sglang.srt.model_executor.cuda_graph_runner import CudaGraphRunner
    from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode

    original = CudaGraphRunner.recapture_if_needed
    if getattr(original, "soft_spatial_floored", False):
        return

    def recapture_if_needed(self, forward_batch):
        return original(self, _FlooredBatch(forward_batch, CaptureHiddenMode.LAST))

    recapture_if_needed.soft_spatial_floored = True
    recapture_if_needed.__wrapped__ = original
    CudaGraphRunner.recapture_if_needed = recapture_if_needed


def can_run_observers() -> dict:
    """The observers called after every ``CudaGraphRunner.can_run`` (sglang 0.5.12 L765: asked
    once per batch whose forward mode graphs can run, i.e. every decode batch of a server with
    graphs on) as ``observer(runner, forward_batch, ok)``, by name; wraps ``can_run`` once."""
    from sglang.srt.model_executor.cuda_graph_runner import CudaGraphRunner

    current = CudaGraphRunner.can_run
    observers = getattr(current, "soft_spatial_observers", None)
    if observers is not None:
        return observers
    observers = {}

    def can_run(self, forward_batch):
        ok = current(self, forward_batch)
        for observe in tuple(observers.values()):
            observe(self, forward_batch, ok)
        return ok

    can_run.soft_spatial_observers = observers
    can_run.__wrapped__ = current
    CudaGraphRunner.can_run = can_run
    return observers


def _requested_hidden_mode(forward_batch):
    """The hidden-state mode ``can_run`` compares with the captured one (sglang 0.5.12 L790: the
    larger of the batch's and its ``spec_info``'s)."""
    from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode
    spec = getattr(getattr(forward_batch, "spec_info", None), "capture_hidden_mode", None)
    return max(forward_batch.capture_hidden_mode or CaptureHiddenMode.NULL,
               spec or CaptureHiddenMode.NULL)


def eager_reason(runner, forward_batch) -> tuple[str, str]:
    """``(kind, words)``: why ``CudaGraphRunner.can_run`` sent ``forward_batch`` to the eager
    forward, for a batch it refused; ``kind`` names the condition (one of ``replace_embeds``,
    ``batch_size``, ``hidden_mode``, ``dp_sync``, ``other``), ``words`` says it with the values.
    The conditions are those of sglang 0.5.12's ``can_run`` (L765-L835), checked in its order."""
    from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode
    bs = int(forward_batch.batch_size)
    if getattr(forward_batch, "replace_embeds", None) is not None:
        return "replace_embeds", "the batch overrides token embeddings (replace_embeds)"
    if bs > int(runner.max_bs):
        return "batch_size", (f"a batch of {bs} rows is larger than the largest captured graph "
                              f"({int(runner.max_bs)} rows: raise cuda_graph_max_bs, or lower "
                              f"the rows in flight)")
    if getattr(runner, "disable_padding", False) and bs not in getattr(runner, "capture_bs", ()):
        return "batch_size", (f"no graph was captured for a batch of {bs} rows, and padding to a "
                              f"captured size is off (disable_padding)")
    requested, captured = _requested_hidden_mode(forward_batch), runner.capture_hidden_mode
    if requested not in (CaptureHiddenMode.NULL, captured):
        why = ("enable_return_hidden_states or a speculative mode holds them there, and SGLang "
               "replays only batches asking for the captured mode or none" if requested < captured
               else "they do not compute it (compat.sglang.capture_graphs_with_last_hidden not "
               "installed in this process?)")
        return "hidden_mode", (f"the batch asks for hidden states {requested.name}, the graphs "
                               f"were captured with {CaptureHiddenMode(captured).name}: {why}")
    if getattr(runner, "require_mlp_sync", False) and not getattr(
            forward_batch, "can_run_dp_cuda_graph", True):
        return "dp_sync", "data-parallel attention: another rank's batch cannot run a graph"
    return "other", ("another of CudaGraphRunner.can_run's conditions (encoder lengths, "
                     "two-batch overlap, ngram speculation, LoRA variant)")


def warn_eager_decodes(warn: Callable[[str], None]) -> None:
    """Call ``warn(message)`` the first time, in this process, that ``CudaGraphRunner.can_run``
    sends a batch to the eager forward for a given reason (:func:`eager_reason`'s ``kind``):
    one message per reason and engine process, naming the reason, the batch size and the
    graphs' largest size. Idempotent (the first ``warn`` stays)."""
    observers = can_run_observers()
    if "warn_eager" in observers:
        return
    said: set = set()

    def observe(runner, forward_batch, ok):
        if ok:
            return
        kind, words = eager_reason(runner, forward_batch)
        if kind not in said:
            said.add(kind)
            warn(f"CUDA graphs: a decode batch ran eagerly, not as a captured graph: {words}. "
                 f"Said once per reason for this engine; such batches run at graphs-off speed")

    observers["warn_eager"] = observe


def problems() -> list:
    """What soft decoding under ``CudaGraphRunner`` relies on (sglang 0.5.12,
    ``model_executor/cuda_graph_runner.py``, ``managers/mm_utils.py``, ``managers/tp_worker.py``):
    the captured batch indexes the real request pool through the runner's static
    ``req_pool_indices`` buffer, refreshed before each replay; the decode embedding is computed
    and passed as ``input_embeds`` (what the hook replaces); sampling runs after the forward,
    outside the graph; the runner recaptures when the requested hidden-state mode changes."""
    from sglang.srt.managers import mm_utils, tp_worker
    from sglang.srt.model_executor import cuda_graph_runner as cgr
    facts = [(cgr.CudaGraphRunner.capture_one_batch_size,
              ("buffers.req_pool_indices[:bs]", "req_pool_indices=req_pool_indices",
               "req_to_token_pool=self.model_runner.req_to_token_pool")),
             (cgr.DecodeInputBuffers.populate_from_forward_batch,
              ("self.req_pool_indices[:raw_bs]", "forward_batch.req_pool_indices")),
             # recapture_only_above_last: the batch is read for its modes only, and the graphs
             # are recaptured when the captured mode differs from the largest one required
             (cgr.CudaGraphRunner.recapture_if_needed, (
                 "forward_batch.capture_hidden_mode",
                 'getattr(forward_batch.spec_info, "capture_hidden_mode", None)',
                 "if self.capture_hidden_mode != required_capture_hidden_mode:",
                 "self.capture()")),
             (cgr.CudaGraphRunner.replay_prepare, ("self.recapture_if_needed(forward_batch)",)),
             # eager_reason: can_run's conditions, in its order
             (cgr.CudaGraphRunner.can_run, ("if forward_batch.replace_embeds is not None:",
                                            "cuda_graph_bs <= self.max_bs",
                                            "forward_batch.can_run_dp_cuda_graph")),
             # capture_graphs_with_last_hidden: NULL at start, then the start-up capture; a batch
             # asking for another mode than the captured one (but NULL) does not replay
             (cgr.CudaGraphRunner.__init__, ("self.capture_hidden_mode = CaptureHiddenMode.NULL",
                                             "self.capture()")),
             # ... and each batch size's capture resets the mode through the attribute (the
             # descriptor's floor) and captures its forward with it
             (cgr.CudaGraphRunner.capture_one_batch_size, (
                 "if self.capture_hidden_mode != CaptureHiddenMode.FULL:",
                 "self.capture_hidden_mode = (", "capture_hidden_mode=self.capture_hidden_mode")),
             (cgr.CudaGraphRunner.can_run, ("requested_capture_hidden_mode == CaptureHiddenMode.NULL",
                                            "requested_capture_hidden_mode == self.capture_hidden_mode")),
             (mm_utils.general_mm_embed_routine, ("input_embeds = embed_tokens(input_ids)",
                                                  "input_embeds=input_embeds")),
             (tp_worker.TpModelWorker.forward_batch_generation,
              ("self.model_runner.forward(", "self.model_runner.sample("))]
    return missing(facts, "soft decoding under CUDA graphs")
