"""Which kernels SGLang's layers run (sglang 0.5.12, ``layers/utils/multi_platform.py``,
``layers/logits_processor.py``): every layer's PyTorch ``forward_native`` where asked (the GPU kit's
fp32 engines), and the output head in fp32 that ``density.fp32_logits`` relies on. Imports sglang
only inside functions."""
from __future__ import annotations

import inspect

from soft_spatial.compat.sglang.checks import missing

__all__ = ["NATIVE_OPS_ENV", "native_ops_requested", "use_native_ops", "problems"]


NATIVE_OPS_ENV = "SOFT_SPATIAL_SGLANG_NATIVE_OPS"


def native_ops_requested(environ=None) -> bool:
    """Whether ``$SOFT_SPATIAL_SGLANG_NATIVE_OPS`` asks for native ops ("1", "true", "yes", "on");
    anything else but unset or "0"/"false"/"no"/"off" is refused, naming the variable."""
    import os
    value = (os.environ if environ is None else environ).get(NATIVE_OPS_ENV, "").strip().lower()
    if value in ("", "0", "false", "no", "off"):
        return False
    if value in ("1", "true", "yes", "on"):
        return True
    raise ValueError(f"${NATIVE_OPS_ENV}={value!r}: expected 1 or 0")


def use_native_ops() -> None:
    """Make every SGLang layer that has a ``forward_native`` (pure PyTorch) use it instead of its
    platform kernel, for layers built from now on in this process. Idempotent.

    sglang 0.5.12: ``MultiPlatformOp.__init__`` binds ``self._forward_method =
    self.dispatch_forward()`` (``layers/utils/multi_platform.py`` L36), which picks
    ``forward_cuda`` on CUDA; RMSNorm's (``layers/layernorm.py``) is sgl_kernel's fused kernel,
    which dispatches on fp16/bf16 only and, through flashinfer, builds its CUDA module on first use
    (the GPU kit trims flashinfer's JIT sources). This wraps ``dispatch_forward`` to return
    ``forward_native`` for every class that defines one. In fp32 the native RMSNorm is the same
    operations as transformers' (mean of squares, rsqrt, weight); in bf16 the ops are unfused, so
    throughput is below SGLang's real kernels (the GPU kit's report says which path ran).
    """
    from sglang.srt.layers.utils.multi_platform import MultiPlatformOp

    original = MultiPlatformOp.dispatch_forward
    if getattr(original, "soft_spatial_native", False):
        return

    def dispatch_forward(self):
        if type(self).forward_native is not MultiPlatformOp.forward_native:
            return self.forward_native
        return original(self)

    dispatch_forward.soft_spatial_native = True
    dispatch_forward.__wrapped__ = original
    MultiPlatformOp.dispatch_forward = dispatch_forward


def _native_problems() -> list:
    """What :func:`use_native_ops` relies on: ``MultiPlatformOp.__init__`` binds its forward
    through ``self.dispatch_forward()`` and the base class has a ``forward_native`` to compare."""
    from sglang.srt.layers.utils.multi_platform import MultiPlatformOp
    problems = []
    if not callable(getattr(MultiPlatformOp, "forward_native", None)):
        problems.append("MultiPlatformOp.forward_native is gone (use_native_ops)")
    init = inspect.getsource(MultiPlatformOp.__init__)
    if "self._forward_method" not in init or "self.dispatch_forward()" not in init:
        problems.append("MultiPlatformOp.__init__ no longer binds self._forward_method = "
                        "self.dispatch_forward() (use_native_ops)")
    return problems


def _fp32_lm_head_problems() -> list:
    """What ``density.fp32_logits`` relies on (sglang 0.5.12): the server argument
    ``enable_fp32_lm_head`` exists, every ``LogitsProcessor`` reads it from the server-wide
    arguments, and ``_compute_lm_head`` then multiplies the hidden states and the head's weight
    upcast to fp32 (``layers/logits_processor.py`` L254, L898)."""
    from sglang.srt.layers.logits_processor import LogitsProcessor
    from sglang.srt.server_args import ServerArgs
    problems = []
    if "enable_fp32_lm_head" not in getattr(ServerArgs, "__dataclass_fields__", {}):
        problems.append("ServerArgs.enable_fp32_lm_head is gone (density.fp32_logits)")
    return problems + missing(
        [(LogitsProcessor.__init__,
          ("self.use_fp32_lm_head = get_global_server_args().enable_fp32_lm_head",)),
         (LogitsProcessor._compute_lm_head,
          ("if self.use_fp32_lm_head:", "hidden_states.to(torch.float32), "
                                        "lm_head.weight.to(torch.float32).T"))],
        "the output head in fp32")


def problems() -> list:
    return _native_problems() + _fp32_lm_head_problems()
