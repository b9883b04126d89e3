"""Every rollout engine keeps the :class:`~soft_spatial.engines.base.Engine` contract: each of its
methods takes the protocol's parameters (same names, kinds, order and defaults) and adds only
keyword parameters with defaults. Engines are found in the source (any class under
``soft_spatial/engines`` with a ``generate`` method), so a new one is checked too."""
import ast
import importlib
import inspect
from pathlib import Path

import pytest

from soft_spatial.engines.base import Engine

ROOT = Path(__file__).resolve().parents[2]
PROTOCOL_METHODS = ("generate", "update_weights", "set_controller", "close")
CHECKED = {"soft_spatial.engines.local.LocalEngine", "soft_spatial.engines.sglang.engine.SGLangEngine"}


def engine_classes() -> set[str]:
    """Dotted names of the classes under soft_spatial/engines that define ``generate``."""
    found = set()
    for path in (ROOT / "soft_spatial" / "engines").rglob("*.py"):
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.ClassDef) and any(
                    isinstance(f, ast.FunctionDef) and f.name == "generate" for f in node.body):
                found.add(f"{module}.{node.name}")
    return found


def load(dotted: str):
    module, name = dotted.rsplit(".", 1)
    return getattr(importlib.import_module(module), name)


def signature_problems(cls) -> list[str]:
    """How ``cls`` departs from :class:`Engine` (empty: it keeps the contract)."""
    problems = []
    for name in PROTOCOL_METHODS:
        if not callable(getattr(cls, name, None)):
            problems.append(f"{cls.__name__} has no {name}()")
            continue
        want = list(inspect.signature(getattr(Engine, name)).parameters.values())
        have = list(inspect.signature(getattr(cls, name)).parameters.values())
        for w, h in zip(want, have):
            if (w.name, w.kind, w.default) != (h.name, h.kind, h.default):
                problems.append(f"{cls.__name__}.{name}: parameter {h.name!r} ({h.kind.description}, "
                                f"default {h.default!r}) where the protocol has {w.name!r} "
                                f"({w.kind.description}, default {w.default!r})")
        if len(have) < len(want):
            problems.append(f"{cls.__name__}.{name} lacks {[p.name for p in want[len(have):]]}")
        extra = [p.name for p in have[len(want):]
                 if p.default is inspect.Parameter.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
        if extra:
            problems.append(f"{cls.__name__}.{name} requires parameters the protocol lacks: {extra}")
    return problems


def test_every_engine_in_the_source_is_checked():
    assert engine_classes() - {"soft_spatial.engines.base.Engine"} == CHECKED


@pytest.mark.parametrize("dotted", sorted(CHECKED))
def test_engine_keeps_the_protocol(dotted):
    assert signature_problems(load(dotted)) == []


def test_a_departing_engine_is_caught():
    class Renamed:  # seeds renamed, close missing, a required extra parameter
        def generate(self, prompts, soft_thinking=None, sampling=None, n=1, seed=0, row_seeds=None,
                     progress=False):
            return []

        def update_weights(self, state_dict, strict):
            pass

        def set_controller(self, controller):
            pass

    problems = signature_problems(Renamed)
    assert any("'row_seeds'" in p for p in problems)
    assert any("no close()" in p for p in problems)
    assert any("requires parameters the protocol lacks: ['strict']" in p for p in problems)
    assert not isinstance(Renamed(), Engine)


def test_local_engine_is_an_engine(tiny_qwen3_text_small):
    from soft_spatial.engines.local import LocalEngine

    engine = LocalEngine.from_pretrained(tiny_qwen3_text_small)
    assert isinstance(engine, Engine)
    engine.close()
    engine.close()  # idempotent


class _Tokenizer:
    """``encode`` of a tokenizer that has ``</think>`` as one token (id 7) and nothing else."""

    def encode(self, text, add_special_tokens=False):
        return [7] if text == "</think>" else [3, 4, 5]

    name_or_path = "stub"


@pytest.mark.parametrize("mode", ["hard", "fixed", "adaptsoft"])
def test_the_think_end_token_is_read_in_every_mode(mode):
    """Every mode knows the token that closes the think block; without it as one token a soft mode
    cannot switch (error), hard decoding has no think block to close (None)."""
    from soft_spatial.engines.base import think_end_token
    from soft_spatial.softthink import SoftThinkingConfig
    assert think_end_token(_Tokenizer(), SoftThinkingConfig(mode=mode)) == 7
    missing = SoftThinkingConfig(mode=mode, think_end="<nothink>")
    if mode == "hard":
        assert think_end_token(_Tokenizer(), missing) is None
    else:
        with pytest.raises(ValueError, match="not a single token"):
            think_end_token(_Tokenizer(), missing)


def test_think_end_index_is_the_first_think_end():
    from soft_spatial.engines.base import think_end_index
    assert think_end_index([1, 7, 2, 7], 7) == 1
    assert think_end_index([7], 7) == 0
    assert think_end_index([1, 2, 3], 7) is None and think_end_index([], 7) is None
    assert think_end_index([1, 7], None) is None
