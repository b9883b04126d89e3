"""The native-ops switch ($SOFT_SPATIAL_SGLANG_NATIVE_OPS): set in the engine's process, it reaches a
scheduler process SGLang spawns (the environment is inherited) and makes its layers take their
PyTorch ``forward_native``; both scheduler entries (the plugin's and the stock one) apply it first."""
from __future__ import annotations

import inspect
import multiprocessing as mp

import pytest

from soft_spatial.compat import sglang as compat

pytestmark = pytest.mark.sglang


def _scheduler_probe(queue) -> None:
    """A stand-in scheduler process: SGLang on CUDA would bind forward_cuda."""
    from sglang.srt.layers.layernorm import RMSNorm
    from sglang.srt.layers.utils import multi_platform
    multi_platform._is_cuda = True  # dispatch as on CUDA (this CPU has no AMX kernels either)
    compat.scheduler_process_setup()  # what every scheduler entry runs first
    layer = RMSNorm(8)
    queue.put(layer._forward_method.__func__.__name__)


@pytest.mark.parametrize("value, want", [("1", "forward_native"), ("0", "forward_cuda")])
def test_the_switch_reaches_a_spawned_scheduler_and_rmsnorm_takes_forward_native(
        monkeypatch, value, want):
    monkeypatch.setenv(compat.NATIVE_OPS_ENV, value)
    ctx = mp.get_context("spawn")  # as SGLang starts its schedulers
    queue = ctx.Queue()
    proc = ctx.Process(target=_scheduler_probe, args=(queue,))
    proc.start()
    try:
        got = queue.get(timeout=120)
    finally:
        proc.join(timeout=60)
    assert proc.exitcode == 0
    assert got == want


def test_both_scheduler_entries_apply_the_switch_first():
    from soft_spatial.engines.sglang import hooks
    for entry in (hooks.run_scheduler_process, compat.native_scheduler_process):
        body = inspect.getsource(entry).split('"""')[-1]
        assert body.strip().startswith("sgl_compat.scheduler_process_setup()") or \
            body.strip().startswith("scheduler_process_setup()"), entry


def test_a_bad_value_names_the_variable():
    with pytest.raises(ValueError, match=compat.NATIVE_OPS_ENV):
        compat.native_ops_requested({compat.NATIVE_OPS_ENV: "maybe"})
    assert compat.native_ops_requested({}) is False
