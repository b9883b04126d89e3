"""The warm start's settings: every knob of ``python -m soft_spatial.lab.learning.warmstart`` and of the
learning experiment's ``warmstart`` block, each with its default, its constraint and why, once.

`WarmStartSettings` is the one home of these defaults. The warm start's command config
(`soft_spatial.lab.learning.warmstart.WarmStartConfig`) adds its paths, seed and view; the learning
experiment's block (`soft_spatial.lab.learning.experiment.WarmStartSpec`) adds the views to train. Both reach
Hydra as structured configs (the dataclass first in the YAML's ``defaults``), so
``configs/warmstart.yaml`` holds no value of its own and ``configs/learn.yaml`` only the
experiment's deltas (``noise: 0.3``), each pinned to this class by
``tests/lab/learning/test_warmstart_settings.py``.

Importable without torch: the learning experiment checks its settings before any stage starts.
"""
from __future__ import annotations

from dataclasses import dataclass, fields

__all__ = ["VIEWS", "WarmStartSettings", "OUTPUT_NEUTRAL"]

#: the views a warm start trains path questions in (lab/learning/path_views.py)
VIEWS = ("hard", "mix", "nochain")
#: settings that change how the warm start runs and reports, not the weights it makes: outside its
#: key, so a resume may change them
OUTPUT_NEUTRAL = ("log_every", "save_every", "threads")


@dataclass
class WarmStartSettings:
    """The warm start's knobs (module docstring). Errors name ``warmstart.<knob>``."""

    steps: int = 600
    """Optimizer steps: 600 of 32 records pass about 2.4 times over the learning experiment's
    8,000 training questions (docs/results/learning.md)."""
    batch_size: int = 32
    """Records per step; a record trained in several views brings all of them into its step."""
    lr: float = 2e-3
    """AdamW's peak learning rate: a model of ~1M parameters trained from scratch."""
    warmup_steps: int = 20
    """Linear warm-up of the learning rate from lr / warmup_steps to lr."""
    min_lr_ratio: float = 0.1
    """After the warm-up, cosine decay from lr to lr * min_lr_ratio at the last step."""
    weight_decay: float = 0.01
    """AdamW's decoupled weight decay."""
    clip_grad: float = 1.0
    """Gradient norm clipped to this value every step."""
    answer_weight: float = 10.0
    """Loss weight of the answer letter, 1 of the response's ~15 tokens. At 1 (the plain mean)
    the letter stayed a coin flip even where the reasoning was right; weighted 10x it follows the
    reasoning (93-97%; docs/results/learning.md, "Leaving chance"). Every measured warm start
    used 10."""
    noise: float = 0.0
    """Fraction of demonstrations whose letter is a uniformly drawn wrong option's, the reasoning
    kept right (the same records for a seed). 0: a clean demonstrator. The learning experiment
    sets 0.3 (configs/learn.yaml) so that GRPO, rewarded by the real answer, has a letter to fix;
    the softness experiment keeps 0 (configs/budget/paths.yaml)."""
    distractor_mass: float = 0.05
    """ε, the top-K mass of the soft view's distractor cells (the live cells share 1 − ε): a
    rollout's candidates beyond the live set carry little probability (lab/learning/path_views.py)."""
    log_every: int = 25
    """A progress line (loss, learning rate, tokens/s) every this many steps."""
    save_every: int = 100
    """A resumable checkpoint (model, optimizer, schedule, data order) every this many steps."""
    threads: int | None = None
    """torch threads (None: torch's choice)."""

    def __post_init__(self):
        def need(ok: bool, name: str, rule: str) -> None:
            if not ok:
                raise ValueError(f"warmstart.{name} must be {rule}, got {getattr(self, name)!r}")

        for name in ("steps", "batch_size", "log_every", "save_every"):
            need(getattr(self, name) >= 1, name, ">= 1")
        need(self.warmup_steps >= 0, "warmup_steps", ">= 0")
        need(self.lr > 0, "lr", "> 0")
        need(0 < self.min_lr_ratio <= 1, "min_lr_ratio", "in (0, 1]")
        need(self.weight_decay >= 0, "weight_decay", ">= 0")
        need(self.clip_grad > 0, "clip_grad", "> 0")
        need(self.answer_weight > 0, "answer_weight", "> 0")
        need(0 <= self.noise < 1, "noise", "in [0, 1)")
        need(0 < self.distractor_mass < 1, "distractor_mass", "in (0, 1)")
        need(self.threads is None or self.threads >= 1, "threads", "None or >= 1")

    def weight_settings(self) -> dict:
        """The settings the trained weights depend on (all but :data:`OUTPUT_NEUTRAL`): what a
        warm start's key holds."""
        return {f.name: getattr(self, f.name) for f in fields(WarmStartSettings)
                if f.name not in OUTPUT_NEUTRAL}

