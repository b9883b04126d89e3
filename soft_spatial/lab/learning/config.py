"""The learning experiment's settings, each default once with why: `LearnConfig` and its specs
(``python -m soft_spatial.lab.learning``), `WarmStartSettings`, every knob of the warm start, shared
by the experiment's ``warmstart`` block (`WarmStartSpec` adds the views to train) and ``python -m
soft_spatial.lab.learning.warmstart`` (`WarmStartConfig` adds its paths, seed and view). They reach
Hydra as structured configs (the dataclass first in the YAML's ``defaults``), so
``configs/learning/warmstart.yaml`` holds no value of its own and ``learn.yaml`` (with its budgets,
``budget/``) only the experiment's deltas, pinned to these classes by
``tests/lab/learning/test_config.py``. Every setting is checked here, before any stage starts, a
bad one refused naming its key. Importable without torch.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

__all__ = ["PROG", "CONFIG_DIR", "EVAL_MODE", "VIEWS", "OUTPUT_NEUTRAL", "WarmStartSettings",
           "WarmStartConfig", "DataSpec", "ModelSpec", "WarmStartSpec", "TrainSpec", "EvalSpec",
           "LearnConfig"]

PROG = "python -m soft_spatial.lab.learning"
#: the experiment's Hydra configs: learn.yaml, budget/, warmstart.yaml, and recipe/ (training's
#: ``recipe=`` group, registered by soft_spatial/train.py)
CONFIG_DIR = Path(__file__).resolve().parents[3] / "configs" / "learning"
#: arm -> the decoding mode its policy is evaluated in
EVAL_MODE = {"hard": "hard", "soft_fixed": "fixed", "soft_fixed_hi": "fixed",
             "adaptsoft": "adaptsoft"}
#: the views a warm start trains path questions in (lab/learning/path_views.py)
VIEWS = ("hard", "mix", "nochain")
#: settings that change how the warm start runs and reports, not the weights it makes: outside its
#: key, so a resume may change them
OUTPUT_NEUTRAL = ("log_every", "save_every", "threads")


def _need(ok: bool, key: str, value, rule: str) -> None:
    """Refuse a setting, naming its key."""
    if not ok:
        raise ValueError(f"{key} must be {rule}, got {value!r}")


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
    sets 0.3 (configs/learning/learn.yaml) so that GRPO, rewarded by the real answer, has a
    letter to fix; the softness experiment keeps 0 (configs/learning/budget/paths.yaml)."""
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
            _need(ok, f"warmstart.{name}", getattr(self, name), rule)

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


@dataclass(kw_only=True)
class WarmStartConfig(WarmStartSettings):
    """Typed form of ``configs/learning/warmstart.yaml``, ``python -m
    soft_spatial.lab.learning.warmstart``'s: the knobs (`WarmStartSettings`, their defaults and
    constraints) and what one run reads and writes."""

    model_path: str
    """The initial model (a Hugging Face directory with its processor)."""
    data_root: str
    """A benchmark in the OmniSpatial layout (``python -m soft_spatial.data.synthetic --out``)."""
    output_dir: str
    """Where the trained model directory appears, whole (its checkpoints in ``OUT.work``)."""
    split: str = "train"
    """The split trained on."""
    seed: int = 0
    """Data order, the demonstrator's wrong letters, the hard view's traces and the soft view's
    noise."""
    view: str = "hard"
    """Which views path questions are trained in: ``hard`` (the hard view alone, W-hard),
    ``mix`` (hard and soft view of every scene in each step, W-mix) or ``nochain`` (the answer
    alone): :mod:`soft_spatial.lab.learning.path_views`."""

    def __post_init__(self):
        super().__post_init__()
        if self.view not in VIEWS:
            raise ValueError(f"warmstart.view must be one of {VIEWS}, got {self.view!r}")


@dataclass
class DataSpec:
    """``python -m soft_spatial.data.synthetic``'s knobs for this experiment."""

    train: int = 8000
    """Training questions: 4000 scenes per task (mental rotation has few distinct ones)."""
    test: int = 300
    """Held-out questions, the evaluation's."""
    size: int = 96
    """Image side in pixels; the tiny processor makes (size/32)^2 image tokens."""
    options: list[int] = field(default_factory=lambda: [4])
    """Option counts per question (chance 25% with 4)."""
    difficulty: str = "medium"
    """The generator's difficulty preset (distractors, margins, sizes, counts)."""
    describe: bool = True
    """Questions start with the scene in words: a tiny model trained from scratch reads text,
    never the pixels (docs/results/learning.md)."""
    option_order: str = "canonical"
    """One option order per task: the letter follows from the answer."""
    tasks: list[str] = field(default_factory=lambda: ["mental_rotation", "counting"])
    """The tasks this tiny model learns from the warm start: relative position and egocentric
    stay at chance in every warm start measured, depth order in most; they only add coin-flip
    rewards."""

    def __post_init__(self):
        from soft_spatial.data.synthetic import DIFFICULTIES, SyntheticConfig

        for name in ("train", "test"):
            _need(getattr(self, name) >= 1, f"data.{name}", getattr(self, name), ">= 1")
        _need(self.difficulty in DIFFICULTIES, "data.difficulty", self.difficulty,
              f"one of {sorted(DIFFICULTIES)}")
        _need(self.option_order in ("shuffled", "canonical"), "data.option_order",
              self.option_order, "shuffled or canonical")
        try:  # the generator's own checks: tasks, option counts, the board's image size
            SyntheticConfig(size=self.size, tasks=tuple(self.tasks), options=tuple(self.options),
                            describe=self.describe, option_order=self.option_order)
        except ValueError as e:
            raise ValueError(f"data (data.tasks, data.options, data.size): {e}") from None


@dataclass
class ModelSpec:
    """The tiny Qwen3-VL the warm start trains from scratch."""

    hidden_size: int = 128
    intermediate_size: int = 256
    num_hidden_layers: int = 4
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    head_dim: int = 32
    vision_hidden_size: int = 64
    vision_depth: int = 2
    bpe_size: int = 640
    """A small BPE trained with the benchmark's words."""
    system_prompt_token: bool = True
    """Our system prompt is one added token (a prompt of ~60 tokens, not ~200)."""
    init_std: float = 0.02
    """Weights (and the output layer) ~ N(0, init_std), as for training from scratch."""

    def __post_init__(self):
        for name, value in asdict(self).items():
            if isinstance(value, int) and not isinstance(value, bool):
                _need(value >= 1, f"model.{name}", value, ">= 1")
        _need(self.init_std > 0, "model.init_std", self.init_std, "> 0")
        _need(self.num_attention_heads % self.num_key_value_heads == 0, "model.num_key_value_heads",
              self.num_key_value_heads, f"a divisor of model.num_attention_heads "
              f"({self.num_attention_heads})")


@dataclass
class WarmStartSpec(WarmStartSettings):
    """The warm starts: every knob of `WarmStartSettings` (defaults, constraints and why live
    there), and the views to train."""

    views: list[str] = field(default_factory=lambda: ["hard"])
    """The warm starts to train, one per view (lab/learning/path_views.py: hard, mix, nochain); the
    first is the arms' start."""

    def __post_init__(self):
        super().__post_init__()
        _need(bool(self.views) and all(v in VIEWS for v in self.views)
              and len(set(self.views)) == len(self.views), "warmstart.views", self.views,
              f"a non-empty list of distinct views among {list(VIEWS)}")


@dataclass
class TrainSpec:
    """``python -m soft_spatial.train`` per arm."""

    steps: int = 40
    """GRPO steps per arm (``trainer.total_training_steps``)."""
    save_freq: int = 10
    """A verl checkpoint every this many steps (the resume points)."""
    overrides: list[str] = field(default_factory=list)
    """Extra keys of configs/train.yaml for every arm."""

    def __post_init__(self):
        _need(self.steps >= 1, "train.steps", self.steps, ">= 1")
        _need(self.save_freq >= 1, "train.save_freq", self.save_freq, ">= 1")


@dataclass
class EvalSpec:
    """``python -m soft_spatial.eval`` of the warm starts and the trained policies."""

    samples: int = 4
    """Responses per question, reported as mean@samples."""
    temperature: float = 1.0
    """The temperature the policy is trained at: what GRPO changed."""
    max_new_tokens: int = 32
    """The response budget, as in training (recipe synthetic_cpu)."""

    def __post_init__(self):
        _need(self.samples >= 1, "eval.samples", self.samples, ">= 1")
        _need(self.temperature > 0, "eval.temperature", self.temperature, "> 0")
        _need(self.max_new_tokens >= 1, "eval.max_new_tokens", self.max_new_tokens, ">= 1")


@dataclass
class LearnConfig:
    """Typed form of ``configs/learning/learn.yaml`` (Hydra's structured config ``learn_schema``: the
    YAML and the budgets hold deltas only). Every setting is checked here, before any stage."""

    out: str
    seed: int = 0
    modes: list[str] = field(default_factory=lambda: ["adaptsoft"])
    budget_name: str = "demo"
    data: DataSpec = field(default_factory=DataSpec)
    model: ModelSpec = field(default_factory=ModelSpec)
    warmstart: WarmStartSpec = field(default_factory=WarmStartSpec)
    train: TrainSpec = field(default_factory=TrainSpec)
    eval: EvalSpec = field(default_factory=EvalSpec)
    command: str = PROG
    """The command that runs this configuration: a budget of an experiment built on this one names
    that experiment's command (configs/learning/budget/paths.yaml), which adds its stages
    (`BeforeGRPO`); any other command refuses the budget, naming this one."""
    high_tau: float = 0.9
    """τ of the ``soft_fixed_hi`` arm (the control for a higher mean τ)."""
    entropy_prompts: int = 0
    """Prompts the adaptsoft arm's μ_H/σ_H are re-estimated on, on the arms' warm start
    (budget=paths: 128); 0 keeps the configured values (the 8B model's)."""

    def __post_init__(self):
        unknown = [m for m in self.modes if m not in EVAL_MODE]
        if unknown or len(set(self.modes)) != len(self.modes):
            raise ValueError(f"modes must be distinct arms among {list(EVAL_MODE)}, got "
                             f"{self.modes}")
        _need(bool(self.out), "out", self.out, "a directory")
        _need(self.seed >= 0, "seed", self.seed, ">= 0")
        _need(0 < self.high_tau <= 1, "high_tau", self.high_tau, "in (0, 1]")
        _need(self.entropy_prompts >= 0, "entropy_prompts", self.entropy_prompts, ">= 0")

    def check_command(self, prog: str) -> None:
        """Refuse this configuration in the command ``prog`` when its budget names another one
        (``command``), naming that one."""
        if self.command != prog:
            raise ValueError(f"budget={self.budget_name} is not run by this command: run "
                             f"{self.command} budget={self.budget_name} [seed=S] [out=DIR] "
                             f"[key=value ...] (the budget's command, "
                             f"configs/learning/budget/{self.budget_name}.yaml)")

    @classmethod
    def from_omegaconf(cls, cfg) -> "LearnConfig":
        """The checked config from a composed one; any bad value, type or key is a ValueError
        naming the key."""
        from omegaconf import OmegaConf
        from omegaconf.errors import OmegaConfBaseException

        try:
            return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(cls), cfg))
        except OmegaConfBaseException as e:  # an unknown key, a value of the wrong type
            raise ValueError(str(e).strip()) from None


def register_schemas() -> None:
    """`LearnConfig` and `WarmStartConfig` as Hydra's structured configs ``learn_schema`` and
    ``warmstart_schema`` (``learn.yaml`` and ``warmstart.yaml`` extend them with deltas only). Done
    when this module is imported, so that any compose after the import finds them."""
    from hydra.core.config_store import ConfigStore

    ConfigStore.instance().store(name="learn_schema", node=LearnConfig)
    ConfigStore.instance().store(name="warmstart_schema", node=WarmStartConfig)


register_schemas()
