"""Rollout engines behind one interface, the :class:`~soft_spatial.engines.base.Engine` protocol:
``generate(prompts, soft_thinking, sampling, n, seed)`` returns
:class:`~soft_spatial.engines.base.Completion` objects with a :class:`SoftTrace` each.

``local`` is the embedded PyTorch engine (CPU default, and the reference the SGLang backend is
checked against); ``sglang`` is the GPU plugin (imported lazily: it needs the sglang package).
"""
from soft_spatial.engines.base import Completion, Engine, Prompt, PromptTooLongError

__all__ = ["Completion", "Engine", "Prompt", "PromptTooLongError", "LocalEngine"]


def __getattr__(name):
    if name == "LocalEngine":
        from soft_spatial.engines.local import LocalEngine
        return LocalEngine
    raise AttributeError(name)
