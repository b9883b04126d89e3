"""The learning experiment: ``python -m soft_spatial.lab.learning [budget=full] [seed=S]``.

Does GRPO with soft thinking and AdaptSoft learn? On a laptop-class CPU, end to end through the
real entry points (config: ``configs/learn.yaml``; ``budget=demo`` trains adaptsoft only,
``budget=full`` compares ``hard``, ``soft_fixed`` and ``adaptsoft``)::

    1 data       python -m soft_spatial.data.synthetic        -> out/data (OmniSpatial layout)
    2 model      a tiny Qwen3-VL (small BPE knowing the benchmark's words)  -> out/models/init
    3 warmstart  python -m soft_spatial.lab.learning.warmstart (PyTorch loop) -> out/models/warmstart
    4 parquet    python -m soft_spatial.data.prepare (train, test)      -> out/parquet
    5 eval       python -m soft_spatial.eval of the warm start, per decoding mode
    6 per mode   python -m soft_spatial.train recipe=synthetic_cpu experiment=<mode>
                 -> python -m soft_spatial.export -> python -m soft_spatial.eval of the trained policy
    7 report     out/report.md (table with 95% CIs, per category, the checks of issue 11),
                 out/reward.png, out/tau.png, out/results.json
    8 analysis   python -m soft_spatial.analysis all on the adaptsoft run -> out/analysis

**Experiments built on this one** run it through another command that hands the runner stages of
their own (`BeforeGRPO`: keyed outputs made after the parquet and before any GRPO, and whether GRPO
may proceed); the runner knows them only through that hook. A budget names the command that runs
it (``command``): ``budget=paths`` (the path-tracking questions, three warm starts: two-view
``mix``, hard-only, no-chain; lab/learning/path_views.py) is the softness experiment's, run by
``python -m soft_spatial.lab.softness run budget=paths``, and this command refuses it, naming that
one. Its arms start from the two-view warm start; the adaptsoft arm's μ_H/σ_H are re-estimated on
that warm start first (``entropy_prompts``: ``python -m soft_spatial.stats entropy`` ->
out/stats/entropy.yaml).

**A stage is done only if these settings made it.** Every stage's output has a key
(`infra.provenance`): the settings it depends on and its inputs' keys (so a changed upstream stage
changes every stage below it), recorded beside it as ``<output>.key.json``. Before any stage runs,
every key is compared with the recorded one (`Experiment.preflight`): the same key, the stage is
skipped when its output is complete and resumed otherwise (training from its last verl checkpoint,
evaluation from its JSONL, the warm start from its saved state); another key is refused, naming
each setting that differs, before anything is written. Outputs that follow another output by
contract are made again instead: the export and the evaluations of a trained policy when its
training went on (``train.steps`` raised), the report and the analysis. An output
without a key (written before keys were kept) is refused with how to proceed (docs/development.md,
Reliability). One command at a time per ``out`` (``out/.lock``); the settings are checked before
anything is written, so a refused command leaves no trace.

Every stage's child process is tethered to this one (`infra.tether`): however this command ends
(Ctrl-C, SIGTERM with exit 143, SIGHUP, SIGKILL), nothing it started is left running. Logs of every
subprocess are in ``out/logs``; training progress (reward, accuracy, τ range per step) is printed as
the steps finish.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Protocol

from soft_spatial.infra import tether
from soft_spatial.infra.dirlock import DirLock, DirLockedError, NotADirectoryOutput, check_dir_path
from soft_spatial.infra.provenance import (OutputKeyMismatch, compare, differences, make_key,
                                           read_key, record)
from soft_spatial.infra.signals import command
from soft_spatial.lab.learning.warmstart_settings import VIEWS, WarmStartSettings

__all__ = ["LearnConfig", "Experiment", "BeforeGRPO", "Keyed", "stage_key", "StageFailed", "EVAL_MODE",
           "run_experiment", "main"]

PROG = "python -m soft_spatial.lab.learning"
CONFIG_DIR = Path(__file__).resolve().parents[3] / "configs"
#: arm -> the decoding mode its policy is evaluated in
EVAL_MODE = {"hard": "hard", "soft_fixed": "fixed", "soft_fixed_hi": "fixed",
             "adaptsoft": "adaptsoft"}
#: arm -> its training preset (configs/experiment/), where the two differ
PRESET = {"soft_fixed_hi": "soft_fixed"}
#: the warm start evaluated in each decoding mode; adaptsoft's untrained controller gives τ = τ₀
#: exactly (zero output layer, a = b = 0), so its "before" is the fixed-τ₀ evaluation
BEFORE_MODE = {"hard": "hard", "fixed": "fixed", "adaptsoft": "fixed"}


def _need(ok: bool, key: str, value, rule: str) -> None:
    """Refuse a setting, naming its key."""
    if not ok:
        raise ValueError(f"{key} must be {rule}, got {value!r}")


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
    """Typed form of ``configs/learn.yaml`` (Hydra's structured config ``learn_schema``: the
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
    that experiment's command (configs/budget/paths.yaml), which adds its stages (`BeforeGRPO`);
    any other command refuses the budget, naming this one."""
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


def register_schema() -> None:
    """`LearnConfig` as Hydra's structured config ``learn_schema`` (``configs/learn.yaml``
    extends it with the experiment's deltas). Done when this module is imported, so that any
    ``compose("learn")`` after the import finds it."""
    from hydra.core.config_store import ConfigStore

    ConfigStore.instance().store(name="learn_schema", node=LearnConfig)


register_schema()


class StageFailed(RuntimeError):
    """A stage's command failed; the message holds the end of its log."""


# -- keys ------------------------------------------------------------------------------------------
SAME, ABSENT, REDO = "same", "absent", "redo"
ANY = ("",)  # redo_on: any difference (an output that only follows others)


@dataclass
class Keyed:
    """A stage's lasting output and its key (`infra.provenance`), recorded at
    ``<output>.key.json``. ``redo_on``: the key paths whose differences mean "make it again"
    (the output follows an upstream output that changed by contract) rather than "refuse";
    `ANY` for an output that only follows others (its key is recorded once it is complete)."""

    what: str
    output: Path
    key: dict
    redo_on: tuple[str, ...] = ()

    @property
    def key_path(self) -> Path:
        return self.output.with_name(self.output.name + ".key.json")

    @property
    def derived(self) -> bool:
        return self.redo_on == ANY

    def verdict(self) -> str:
        """`SAME`, `ABSENT` (nothing there yet) or `REDO`; refuses (`OutputKeyMismatch`) an
        output of other settings, naming what differs, and an output without a key. Reads only."""
        old = read_key(self.key_path)
        if old is None:
            if not self.output.exists():
                return ABSENT
            if self.derived:
                return REDO
            raise OutputKeyMismatch(
                f"{self.what}: {self.output} has no key ({self.key_path.name}): it was written "
                f"before {PROG} recorded the settings that make each output, or not by it, so "
                f"nothing says these settings made it. Remove it to make it again with these "
                f"settings, or choose another out=.")
        diff = differences(old, self.key)
        if not diff:
            return SAME
        if self.redo_on and all(d.startswith(self.redo_on) for d in diff):
            return REDO
        compare(self.key_path, self.key, self.what, hint=(
            f"Choose another out= for these settings, or run with the recorded ones (remove "
            f"{self.output} and its key to make it again)."))
        raise AssertionError("unreachable: compare raised")  # pragma: no cover


def stage_key(settings: dict, **inputs: Keyed) -> dict:
    """A key of ``settings`` and of the settings behind each input's key."""
    return make_key({**settings, "inputs": {n: k.key["settings"] for n, k in inputs.items()}})


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


def _python() -> list[str]:
    return [sys.executable]


def run_tau0(runs) -> float:
    """τ₀ of the adaptsoft run (its settings file beside the checkpoints; the default without
    one): the report's reference line for τ."""
    from soft_spatial.softthink.settings import SoftSettings, settings_file

    found = settings_file(runs["adaptsoft"]["metrics"].parent) if "adaptsoft" in runs else None
    return (SoftSettings.load(found) if found else SoftSettings()).adaptsoft.tau0


class BeforeGRPO(Protocol):
    """Stages that a command built on this experiment adds after the parquet and before any GRPO
    (the softness experiment's Phase 0 gates, lab/softness/phase0.py): the runner knows them only
    through this. They are keyed as the runner's own (`Keyed`, made through `Experiment.start`,
    `Experiment.finish`, `Experiment.evaluate`), so `Experiment.preflight` compares their keys
    before anything runs and a re-run skips what is complete."""

    def check(self, cfg: LearnConfig) -> None:
        """Refuse a configuration these stages cannot run on: a ValueError naming the setting."""

    def stages(self, exp: Experiment) -> list[Keyed]:
        """Their keyed outputs, in the order `run` makes them."""

    def run(self, exp: Experiment) -> bool:
        """Make them (each skipped when complete under its key); whether GRPO may proceed (when
        not, the run stops there, and this has said why)."""


class Experiment:
    """The stages of the learning experiment over one output directory (module docstring), with
    ``before_grpo``'s stages after the parquet. A configuration with nothing to run (no arm, no
    such stages) or one ``before_grpo`` cannot run on is refused here (ValueError naming the
    setting), before anything is written."""

    def __init__(self, cfg: LearnConfig, before_grpo: BeforeGRPO | None = None):
        if not cfg.modes and before_grpo is None:
            raise ValueError(f"modes must name at least one arm among {list(EVAL_MODE)}, got []")
        if before_grpo is not None:
            before_grpo.check(cfg)
        self.cfg = cfg
        self.before_grpo = before_grpo
        self.out = Path(cfg.out).resolve()
        self.logs = self.out / "logs"
        self.data = self.out / "data"
        self.init_model = self.out / "models" / "init"
        self.warm = self.out / "models" / "warmstart"  # the first view's: the arms' start
        self.parquet = self.out / "parquet"
        self.env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
                        TOKENIZERS_PARALLELISM="false", RAY_USAGE_STATS_ENABLED="0",
                        TRANSFORMERS_VERBOSITY="error")  # one processor warning per sample
        self.t0 = time.time()

    # -- plumbing ------------------------------------------------------------------------------
    def say(self, msg: str) -> None:
        print(f"[{(time.time() - self.t0) / 60:5.1f} min] {msg}", flush=True)

    def _run(self, name: str, cmd: Sequence[str], env: dict | None = None,
             follow: Callable[[tether.Tethered], None] | None = None) -> None:
        """Run a stage's command, tethered to this process (`infra.tether`: it and whatever it
        starts end with this process however it ends), its output in ``logs/<name>.log``
        (``follow(child)`` watches it meanwhile). Raise `StageFailed` with the log's tail."""
        self.logs.mkdir(parents=True, exist_ok=True)
        log = self.logs / f"{name}.log"
        with log.open("a") as f:
            f.write(f"\n$ {' '.join(map(str, cmd))}\n")
            f.flush()
            child = tether.start(list(map(str, cmd)), stdout=f, stderr=subprocess.STDOUT,
                                 env=env or self.env, cwd=CONFIG_DIR.parent)
            try:
                if follow is not None:
                    follow(child)
                child.wait()
            finally:  # what is left of it (Ray's workers, a killed command's children) ends here
                tether.stop(child)
        if child.returncode != 0:
            tail = "".join(log.read_text(errors="replace").splitlines(True)[-30:])
            raise StageFailed(f"{name} failed (exit {child.returncode}); log {log}:\n{tail}")

    def start(self, stage: Keyed) -> str:
        """Before a stage makes its output: whether it is to run (its output absent, incomplete
        or made again). A stage that keeps its output across runs records its key first (its
        resume then belongs to it); the output of a redone stage is removed first."""
        verdict = stage.verdict()
        if verdict == REDO:
            _remove(stage.output)
            stage.key_path.unlink(missing_ok=True)
        if not stage.derived:
            stage.key_path.parent.mkdir(parents=True, exist_ok=True)
            record(stage.key_path, stage.key)
        return verdict

    @staticmethod
    def finish(stage: Keyed) -> None:
        """After a derived stage completed: its key, which says it is complete."""
        if stage.derived:
            record(stage.key_path, stage.key)

    # -- the keys ------------------------------------------------------------------------------
    def data_stage(self) -> Keyed:
        return Keyed("1 data", self.data, stage_key({"seed": self.cfg.seed, **asdict(self.cfg.data)}))

    def model_stage(self) -> Keyed:
        c = self.cfg
        return Keyed("2 model", self.init_model,
                     stage_key({"seed": c.seed, "tasks": c.data.tasks, **asdict(c.model)}))

    def warm_dir(self, view: str) -> Path:
        """The warm start of ``view``: ``models/warmstart`` for the first view, else
        ``models/warmstart_<view>``."""
        return self.warm if view == self.cfg.warmstart.views[0] else self.warm.with_name(
            f"warmstart_{view}")

    def warm_stage(self, view: str) -> Keyed:
        w = self.cfg.warmstart
        return Keyed(f"3 warm start {view}", self.warm_dir(view),
                     stage_key({**w.weight_settings(), "view": view, "seed": self.cfg.seed},
                               data=self.data_stage(), model=self.model_stage()))

    def parquet_stage(self) -> Keyed:
        return Keyed("4 parquet", self.parquet,
                     stage_key({}, data=self.data_stage(),
                               processor=self.warm_stage(self.cfg.warmstart.views[0])))

    def eval_stage(self, name: str, model: Keyed, mode: str, controller: bool = False,
                   extra: Sequence[str] = (), trained: bool = False) -> Keyed:
        """An evaluation of ``model``, made again when ``eval.samples`` changed (a row's text
        depends on the rows decoded with it, so the evaluation's own key holds ``samples``: more
        samples cannot extend a run) and, a trained policy's, when the policy changed."""
        e = self.cfg.eval
        return Keyed(f"eval {name}", self.out / "eval" / name, stage_key(
            {"mode": mode, "controller": controller, "extra": list(extra),
             "temperature": e.temperature, "max_new_tokens": e.max_new_tokens,
             "seed": self.cfg.seed, "samples": e.samples}, data=self.data_stage(), model=model),
            redo_on=("settings.samples",) + (("settings.inputs.model.",) if trained else ()))

    def before_stage(self, mode: str) -> Keyed:
        name = f"warmstart_{BEFORE_MODE[EVAL_MODE[mode]]}"
        name += f"_{self.cfg.high_tau:g}" if mode == "soft_fixed_hi" else ""
        return self.eval_stage(name, self.warm_stage(self.cfg.warmstart.views[0]),
                               BEFORE_MODE[EVAL_MODE[mode]], extra=self.arm_overrides(mode))

    def entropy_stage(self) -> Keyed | None:
        c = self.cfg
        if c.entropy_prompts <= 0 or "adaptsoft" not in c.modes:
            return None
        return Keyed("5e entropy", self.out / "stats" / "entropy.yaml",
                     stage_key({"prompts": c.entropy_prompts, "train_overrides": c.train.overrides},
                               warm=self.warm_stage(c.warmstart.views[0]),
                               parquet=self.parquet_stage()))

    def train_stage(self, mode: str) -> Keyed:
        """A training run's identity (not ``train.steps``: a run trained further keeps it, as
        ``python -m soft_spatial.train`` resumes it; not ``train.save_freq``)."""
        c = self.cfg
        entropy = self.entropy_stage() if mode == "adaptsoft" else None
        return Keyed(f"6 train {mode}", self.out / "runs" / mode / "checkpoints", stage_key(
            {"mode": mode, "preset": PRESET.get(mode, mode), "seed": c.seed,
             "arm": self.arm_overrides(mode), "overrides": c.train.overrides},
            warm=self.warm_stage(c.warmstart.views[0]), parquet=self.parquet_stage(),
            **({"entropy": entropy} if entropy else {})))

    def export_stage(self, mode: str) -> Keyed:
        return Keyed(f"6 export {mode}", self.out / "runs" / mode / "final",
                     stage_key({"step": self.cfg.train.steps}, train=self.train_stage(mode)),
                     redo_on=ANY)

    def after_stages(self, mode: str) -> list[Keyed]:
        """The trained policy's evaluations: in its own mode, and (path tasks, a soft arm)
        decoded hard: the causal test."""
        from soft_spatial.data.synthetic import PATH_TASKS

        export = self.export_stage(mode)
        stages = [self.eval_stage(f"{mode}_trained", export, EVAL_MODE[mode],
                                  controller=EVAL_MODE[mode] == "adaptsoft",
                                  extra=self.arm_overrides(mode), trained=True)]
        if any(t in PATH_TASKS for t in self.cfg.data.tasks) and EVAL_MODE[mode] != "hard":
            stages.append(self.eval_stage(f"{mode}_trained_hard", export, "hard", trained=True))
        return stages

    def report_stage(self) -> Keyed:
        c = self.cfg
        inputs = {}
        for m in c.modes:
            inputs[f"{m}_before"] = self.before_stage(m)
            inputs[f"{m}_after"] = self.after_stages(m)[0]
        return Keyed("7 report", self.out / "report.md",
                     stage_key({"seed": c.seed, "budget": c.budget_name}, **inputs), redo_on=ANY)

    def analysis_stage(self) -> Keyed:
        return Keyed("8 analysis", self.out / "analysis",
                     stage_key({}, after=self.after_stages("adaptsoft")[0]), redo_on=ANY)

    def stages(self) -> list[Keyed]:
        """Every keyed output this configuration makes, in the order the run makes them."""
        c = self.cfg
        out = [self.data_stage(), self.model_stage(),
               *(self.warm_stage(v) for v in c.warmstart.views), self.parquet_stage()]
        if self.before_grpo is not None:
            out += self.before_grpo.stages(self)
        out += [self.before_stage(m) for m in c.modes]
        if self.entropy_stage():
            out.append(self.entropy_stage())
        for m in c.modes:
            out += [self.train_stage(m), self.export_stage(m), *self.after_stages(m)]
        if c.modes:
            out.append(self.report_stage())
        if "adaptsoft" in c.modes:
            out.append(self.analysis_stage())
        return out

    def trained_steps(self, mode: str) -> int:
        """The step of the run's latest verl checkpoint (0 without one)."""
        latest = self.out / "runs" / mode / "checkpoints" / "latest_checkpointed_iteration.txt"
        try:
            return int(latest.read_text().strip())
        except FileNotFoundError:
            return 0
        except ValueError:
            raise OutputKeyMismatch(f"{latest}: not a step number; the run's checkpoints cannot "
                                    f"be trusted (remove the run, or repair the file)") from None

    def preflight(self) -> None:
        """Compare every stage's key with the recorded one before anything runs: an output made
        by other settings (or without a key) is refused naming what differs, a training run
        trained past ``train.steps`` too; an ``out`` that is a file, naming it. Reads only."""
        check_dir_path(self.out, "out")
        for stage in self.stages():
            stage.verdict()
        for mode in self.cfg.modes:
            done = self.trained_steps(mode)
            if done > self.cfg.train.steps:
                raise OutputKeyMismatch(
                    f"6 train {mode}: {self.out / 'runs' / mode} trained {done} steps, more than "
                    f"train.steps={self.cfg.train.steps}; its policy is not a "
                    f"{self.cfg.train.steps}-step one. Ask for train.steps={done} or more, or "
                    f"choose another out=.")

    # -- stages --------------------------------------------------------------------------------
    def make_data(self) -> None:
        stage = self.data_stage()
        if self.start(stage) == SAME and (self.data / "OmniSpatial-test" / "data.json").is_file():
            return self.say("1 data: done")
        d = self.cfg.data
        tmp = self.data.with_name("data.tmp")
        _remove(tmp)
        self.say(f"1 data: synthetic benchmark, {d.train} train / {d.test} test questions "
                 f"(log {self.logs / 'data.log'})")
        self._run("data", _python() + [
            "-m", "soft_spatial.data.synthetic", "--out", tmp, "--train", d.train, "--test",
            d.test, "--seed", self.cfg.seed, "--size", d.size, "--options",
            ",".join(map(str, d.options)), "--difficulty", d.difficulty, "--option-order",
            d.option_order, "--tasks", ",".join(d.tasks)] + (["--describe"] if d.describe else []))
        _remove(self.data)  # an incomplete one of these settings
        os.replace(tmp, self.data)

    def build_model(self, out: Path) -> None:
        """The tiny Qwen3-VL of ``model`` (its BPE trained on the benchmark's words) at ``out``
        (which appears whole)."""
        from soft_spatial.data.prompt import SYSTEM_PROMPT
        from soft_spatial.data.synthetic import corpus, path_phrases
        from soft_spatial.models import build_tiny_model

        m, tasks = self.cfg.model, self.cfg.data.tasks
        build_tiny_model(
            out, family="qwen3_vl", vocab="small", seed=self.cfg.seed, corpus=corpus(tasks=tasks),
            bpe_size=m.bpe_size, phrases=([SYSTEM_PROMPT] if m.system_prompt_token else [])
            + path_phrases(tasks), hidden_size=m.hidden_size,
            intermediate_size=m.intermediate_size, num_hidden_layers=m.num_hidden_layers,
            num_attention_heads=m.num_attention_heads, num_key_value_heads=m.num_key_value_heads,
            head_dim=m.head_dim, init_std=m.init_std, head_init_std=m.init_std, vision_config={
                "hidden_size": m.vision_hidden_size, "intermediate_size": 2 * m.vision_hidden_size,
                "depth": m.vision_depth, "out_hidden_size": m.hidden_size})

    def make_model(self) -> None:
        stage = self.model_stage()
        if self.start(stage) == SAME and (self.init_model / "config.json").is_file():
            return self.say("2 model: done")
        m = self.cfg.model
        self.say(f"2 model: tiny Qwen3-VL, hidden {m.hidden_size}, {m.num_hidden_layers} layers")
        _remove(self.init_model)  # an incomplete build of these settings
        self.build_model(self.init_model)

    def make_warmstart(self) -> None:
        w = self.cfg.warmstart
        for view in w.views:
            stage = self.warm_stage(view)
            out, name = stage.output, stage.output.name
            if self.start(stage) == SAME and (out / "model.safetensors").is_file():
                self.say(f"3 warm start {view}: done")
                continue
            self.say(f"3 warm start {view}: {w.steps} supervised steps of {w.batch_size}, lr "
                     f"{w.lr} (log {self.logs / (name + '.log')})")
            knobs = [f"{f.name}={'null' if getattr(w, f.name) is None else getattr(w, f.name)}"
                     for f in fields(WarmStartSettings)]  # every knob, none left to a default
            self._run(name, _python() + [
                "-m", "soft_spatial.lab.learning.warmstart", f"model_path={self.init_model}",
                f"data_root={self.data}", f"output_dir={out}", *knobs, f"view={view}",
                f"seed={self.cfg.seed}"],
                follow=lambda child, name=name: self._follow_log(
                    child, self.logs / f"{name}.log", "warm start step"))

    def make_parquet(self) -> None:
        self.start(self.parquet_stage())
        self.parquet.mkdir(parents=True, exist_ok=True)
        for split in ("train", "test"):
            out = self.parquet / f"{split}.parquet"
            if out.is_file():
                continue
            self.say(f"4 parquet: {split}")
            tmp = out.with_name(f"{split}.tmp.parquet")
            self._run("prepare", _python() + [
                "-m", "soft_spatial.data.prepare", "--benchmark", "omnispatial", "--root",
                self.data, "--split", split, "--out", tmp, "--processor", self.warm,
                "--max-pixels", "0"])
            os.replace(tmp, out)

    def keyed_model(self, path: Path) -> Keyed:
        """The stage that makes the model directory ``path`` (a warm start or an export)."""
        made = [self.warm_stage(v) for v in self.cfg.warmstart.views] + [
            self.export_stage(m) for m in EVAL_MODE]
        found = [k for k in made if k.output == Path(path).resolve()]
        if not found:
            raise ValueError(f"{path}: not a model this experiment makes (a warm start under "
                             f"{self.out / 'models'} or an export under {self.out / 'runs'})")
        return found[0]

    def evaluate(self, name: str, model: Path, mode: str, controller: Path | None = None,
                 extra: Sequence[str] = ()) -> Path:
        """``python -m soft_spatial.eval`` of ``model`` (a warm start or an export of this
        experiment) on the test split as ``eval/<name>``, keyed (`eval_stage`) and resumable;
        returns its directory."""
        made = self.keyed_model(model)
        return self.evaluate_keyed(self.eval_stage(name, made, mode, controller is not None, extra,
                                                   trained=made.derived), model, controller)

    def evaluate_keyed(self, stage: Keyed, model: Path, controller: Path | None = None) -> Path:
        """The evaluation ``stage`` of ``model`` (skipped when complete under its key)."""
        e = self.cfg.eval
        out = stage.output
        settings = stage.key["settings"]
        summary = out / "summary.json"
        n = self.cfg.data.test * e.samples
        if self.start(stage) == SAME and summary.is_file() and json.loads(summary.read_text())[
                "benchmarks"]["omnispatial"]["samples"] == n:
            return out
        name = out.name
        self.say(f"  eval {name} ({settings['mode']}, mean@{e.samples} over {self.cfg.data.test} "
                 f"questions)")
        self._run(f"eval_{name}", _python() + [
            "-m", "soft_spatial.eval", "benchmarks=[omnispatial]", f"data.omnispatial={self.data}",
            f"model.path={model}", f"model.name={name}", f"mode={settings['mode']}",
            f"controller={controller if controller else 'null'}", f"samples={e.samples}",
            f"temperature={e.temperature}", f"max_new_tokens={e.max_new_tokens}",
            f"seed={self.cfg.seed}", f"output_dir={out}", *settings["extra"]])
        return out

    def entropy_overrides(self) -> list[str]:
        """μ_H/σ_H of the arms' warm start (``python -m soft_spatial.stats entropy`` on the
        training prompts, the untrained controller's τ₀), as training overrides."""
        stage = self.entropy_stage()
        if stage is None:
            return []
        out, n = stage.output, self.cfg.entropy_prompts
        if not (self.start(stage) == SAME and out.is_file()):
            self.say(f"5e entropy: mu_H, sigma_H of the warm start over {n} prompts")
            self._run("entropy", _python() + [
                "-m", "soft_spatial.stats", "entropy", "--prompts", n, "--name", "warmstart",
                "--out", out, "--work-dir", self.out / "stats" / "work", "--no-progress",
                "model=tiny", "cluster=cpu", "recipe=synthetic_cpu", f"model.path={self.warm}",
                f"data.train_files={self.parquet / 'train.parquet'}",
                f"data.val_files={self.parquet / 'test.parquet'}", *self.cfg.train.overrides])
        from omegaconf import OmegaConf

        ada = OmegaConf.load(out)["adaptsoft"]
        return [f"adaptsoft.entropy_mean={float(ada.entropy_mean)}",
                f"adaptsoft.entropy_std={float(ada.entropy_std)}"]

    def arm_overrides(self, mode: str) -> list[str]:
        """What an arm sets beyond its preset: ``soft_fixed_hi``'s τ."""
        return [f"soft_thinking.fixed_tau={self.cfg.high_tau}"] if mode == "soft_fixed_hi" else []

    def train(self, mode: str, extra: Sequence[str] = ()) -> Path:
        """GRPO through ``python -m soft_spatial.train`` up to ``train.steps`` (a run trained
        fewer steps is resumed and trained further); returns the checkpoint directory."""
        t = self.cfg.train
        stage = self.train_stage(mode)
        ckpt = stage.output
        if self.start(stage) == SAME and self.trained_steps(mode) >= t.steps:
            self.say(f"6 train {mode}: done")
            return ckpt
        self.say(f"6 train {mode}: {t.steps} GRPO steps through verl "
                 f"(log {self.logs / ('train_' + mode + '.log')})")
        cmd = _python() + [
            "-m", "soft_spatial.train", "model=tiny", "cluster=cpu", "recipe=synthetic_cpu",
            f"experiment={PRESET.get(mode, mode)}", f"model.path={self.warm}",
            f"data.train_files={self.parquet / 'train.parquet'}",
            f"data.val_files={self.parquet / 'test.parquet'}",
            f"trainer.total_training_steps={t.steps}", f"trainer.save_freq={t.save_freq}",
            f"trainer.default_local_dir={ckpt}", f"trainer.experiment_name={mode}",
            f"data.seed={self.cfg.seed}", f"adaptsoft.seed={self.cfg.seed}",
            f"+actor_rollout_ref.rollout.custom.seed={self.cfg.seed}",
            *self.arm_overrides(mode), *extra, *t.overrides]
        env = dict(self.env, VERL_FILE_LOGGER_PATH=str(ckpt / "metrics.jsonl"))
        ckpt.mkdir(parents=True, exist_ok=True)
        self._run(f"train_{mode}", cmd, env,
                  follow=lambda child: self._follow(child, ckpt / "metrics.jsonl", mode, t.steps))
        return ckpt

    def _follow_log(self, child, log: Path, prefix: str) -> None:
        """Echo the lines of ``log`` that start with ``prefix`` while ``child`` runs."""
        pos = log.stat().st_size if log.is_file() else 0
        while True:
            done = child.poll() is not None
            with log.open("rb") as f:
                f.seek(pos)
                chunk = f.read()
            cut = chunk.rfind(b"\n") + 1  # whole lines only
            pos += cut
            for line in chunk[:cut].decode(errors="replace").splitlines():
                if line.startswith(prefix):
                    self.say("  " + line)
            if done:
                return
            time.sleep(2)

    def _follow(self, child, metrics: Path, mode: str, steps: int) -> None:
        """Print one line per finished training step while ``child`` runs."""
        from soft_spatial.lab.learning.report import read_metrics

        seen, last = set(), time.time()
        while True:
            done = child.poll() is not None
            for m in read_metrics(metrics):
                if m["step"] in seen:
                    continue
                seen.add(m["step"])
                now = time.time()
                tau = (f"  tau {m['soft/tau_min']:.2f}..{m['soft/tau_max']:.2f}"
                       if "soft/tau_min" in m else "")
                self.say(f"  {mode} step {m['step']}/{steps}: reward "
                         f"{m.get('critic/score/mean', float('nan')):.3f}, acc "
                         f"{m.get('reward/acc_mean', float('nan')):.3f}{tau} "
                         f"({now - last:.0f} s)")
                last = now
            if done:
                return
            time.sleep(2)

    def merge(self, mode: str, ckpt: Path) -> Path:
        """The final checkpoint as one model directory (``python -m soft_spatial.export``:
        verl's merger, the controller and the run's soft settings)."""
        stage = self.export_stage(mode)
        if self.start(stage) == SAME and stage.output.is_dir():
            return stage.output
        self._run(f"export_{mode}", _python() + [
            "-m", "soft_spatial.export", ckpt, stage.output, "--overwrite"])
        self.finish(stage)
        return stage.output

    def report(self, runs: dict) -> dict:
        """``report.md``, ``results.json`` and the figures (made again when an input changed)."""
        from soft_spatial.lab.learning.report import write_report

        stage = self.report_stage()
        results = self.out / "results.json"
        if self.start(stage) == SAME and results.is_file() and stage.output.is_file():
            self.say("7 report: done")
        else:
            self.say("7 report")
            write_report(self.out, runs, self.data, tau0=run_tau0(runs), seed=self.cfg.seed,
                         budget=self.cfg.budget_name)
            self.finish(stage)
        print((self.out / "report.md").read_text())
        return json.loads(results.read_text())

    def analyse(self, run: dict) -> None:
        """The paper's Figs. 4-7 for the trained adaptsoft policy (``python -m
        soft_spatial.analysis all``) under ``out/analysis``."""
        from soft_spatial.lab.paper.analysis.cli import main as analysis

        stage = self.analysis_stage()
        if self.start(stage) == SAME and stage.output.is_dir():
            return self.say("8 analysis: done")
        self.say("8 analysis: python -m soft_spatial.analysis all (adaptsoft)")
        analysis(["all", "--metrics", str(run["metrics"]), "--eval", str(run["after"]),
                  "--out", str(stage.output), "--min-steps", "3"])
        self.finish(stage)

    def run(self) -> dict:
        """Every stage, in order (the caller holds the lock and ran `preflight`)."""
        c = self.cfg
        self.say(f"learning experiment, budget {c.budget_name}, seed {c.seed}, modes "
                 f"{', '.join(c.modes)}; output {self.out}")
        self.make_data()
        self.make_model()
        self.make_warmstart()
        self.make_parquet()
        if self.before_grpo is not None and not self.before_grpo.run(self):
            return {}  # the hook said why
        if not c.modes:
            self.say("done: no arms asked for")
            return {}
        from soft_spatial.softthink.settings import CONTROLLER_FILE

        self.say("5 eval: the warm start")
        before = {m: self.evaluate_keyed(self.before_stage(m), self.warm) for m in c.modes}
        entropy = self.entropy_overrides()
        runs = {}
        for mode in c.modes:
            ckpt = self.train(mode, entropy if mode == "adaptsoft" else ())
            final = self.merge(mode, ckpt)
            controller = final / CONTROLLER_FILE if EVAL_MODE[mode] == "adaptsoft" else None
            after = [self.evaluate_keyed(stage, final, controller if i == 0 else None)
                     for i, stage in enumerate(self.after_stages(mode))]
            runs[mode] = {"before": before[mode], "after": after[0],
                          "metrics": ckpt / "metrics.jsonl"}
        results = self.report(runs)
        if "adaptsoft" in runs:
            self.analyse(runs["adaptsoft"])
        self.say(f"done: table {self.out / 'report.md'}, reward curve "
                 f"{self.out / 'reward.png'}, tau diagnostics {self.out / 'tau.png'}")
        return results


def run_experiment(cfg: LearnConfig, before_grpo: BeforeGRPO | None = None) -> dict:
    """Check every stage's key (nothing written when one is refused), take ``out``'s lock (a
    second command into it is refused naming the first), check again under it, and run."""
    return _run_checked(Experiment(cfg, before_grpo))


def _run_checked(exp: Experiment) -> dict:
    exp.preflight()
    with DirLock(exp.out, "learning experiment output directory"):
        exp.preflight()  # another command may have written between the first check and the lock
        return exp.run()


def refuse_other_command(cfg: LearnConfig, prog: str) -> None:
    """Refuse a configuration whose budget another command runs (``command``), naming it."""
    if cfg.command != prog:
        raise ValueError(f"budget={cfg.budget_name} is not run by this command: run "
                         f"{cfg.command} budget={cfg.budget_name} [seed=S] [out=DIR] [key=value ...] "
                         f"(the budget's command, configs/budget/{cfg.budget_name}.yaml)")


def main(prog: str = PROG, before_grpo: BeforeGRPO | None = None) -> None:
    """The command ``prog`` over Hydra's command line (``configs/learn.yaml`` and its overrides):
    this experiment, with ``before_grpo``'s stages when a command built on it hands them over."""
    import hydra

    @hydra.main(config_path=str(CONFIG_DIR), config_name="learn", version_base=None)
    def _main(cfg) -> None:
        try:  # a bad setting: refused before anything is written
            config = LearnConfig.from_omegaconf(cfg)
            refuse_other_command(config, prog)
            exp = Experiment(config, before_grpo)
        except ValueError as e:
            raise SystemExit(f"{prog}: {e}") from None
        try:
            _run_checked(exp)
        except (OutputKeyMismatch, DirLockedError, NotADirectoryOutput, StageFailed) as e:
            raise SystemExit(f"{prog}: {e}") from None

    # SIGTERM (Slurm's time limit, timeout, kill) as Ctrl-C: the running stage is stopped (its
    # tether), every finished stage and resumable state kept; one line, exit 143 (130)
    with command(prog, "every finished stage is kept; the same command resumes from them"):
        _main()


if __name__ == "__main__":
    main()
