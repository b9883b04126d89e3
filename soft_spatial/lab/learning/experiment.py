"""The learning experiment: ``python -m soft_spatial.lab.learning [budget=full] [seed=S]``.

Does GRPO with soft thinking and AdaptSoft learn? On a laptop-class CPU, end to end through the
real entry points (config: ``configs/learning/learn.yaml``; ``budget=demo`` trains adaptsoft only,
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

**Experiments built on this one** hand the runner stages of their own through `BeforeGRPO` (keyed
outputs made after the parquet and before any GRPO, and whether GRPO may proceed). A budget names
the command that runs it (``command``): ``budget=paths`` is the softness experiment's, run by
``python -m soft_spatial.lab.softness run budget=paths``; this command refuses it, naming that one.

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
the steps finish. Several commands of one module in a row (the views' warm starts, Phase 0's gate
evaluations: `Experiment.evaluate_many`) run in one child, ``python -m
soft_spatial.infra.one_process``, each as its own command would (its log ``out/logs/<stage>.log``)
with the interpreter's start and imports paid once (about 5 s of CPU per command on 2 cores).
"""
from __future__ import annotations

import json
import os
import shutil
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, fields
from pathlib import Path
from typing import Protocol

from soft_spatial.infra import tether
from soft_spatial.infra.dirlock import DirLock, DirLockedError, NotADirectoryOutput, check_dir_path
from soft_spatial.infra.provenance import ANY, Keyed, OutputKeyMismatch, Verdict, stage_key
from soft_spatial.infra.run_dir import latest_step
from soft_spatial.infra.signals import command
from soft_spatial.lab.learning.config import CONFIG_DIR, EVAL_MODE, PROG, LearnConfig, WarmStartSettings
from soft_spatial.lab.learning.stage_child import StageFailed, follow_log, follow_metrics, run_logged

__all__ = ["Experiment", "BeforeGRPO", "keyed", "StageFailed", "run_experiment", "main"]

#: where the stages' commands run: the repository, whose configs/ they read
ROOT = CONFIG_DIR.parents[1]
#: arm -> its training preset (configs/experiment/), where the two differ
PRESET = {"soft_fixed_hi": "soft_fixed"}
#: the warm start evaluated in each decoding mode; adaptsoft's untrained controller gives τ = τ₀
#: exactly (zero output layer, a = b = 0), so its "before" is the fixed-τ₀ evaluation
BEFORE_MODE = {"hard": "hard", "fixed": "fixed", "adaptsoft": "fixed"}


def keyed(what: str, output: Path, settings: dict, redo_on: tuple[str, ...] = (),
          **inputs: Keyed) -> Keyed:
    """A stage's keyed output (`infra.provenance`): its key holds ``settings`` and its inputs'
    settings (`stage_key`); its refusals say how to proceed with this command."""
    return Keyed(what, output, stage_key(settings, **inputs), redo_on, hint=(
        f"Choose another out= for these settings, or run with the recorded ones (remove {output} "
        f"and its key to make it again)."), unkeyed=(
        f"{what}: {output} has no key ({output.name}.key.json): it was written before {PROG} "
        f"recorded the settings that make each output, or not by it, so nothing says these "
        f"settings made it. Remove it to make it again with these settings, or choose another "
        f"out=."))


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


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
        """A stage's command, its output in ``logs/<name>.log`` (`stage_child.run_logged`)."""
        run_logged(self.logs, name, cmd, env or self.env, ROOT, follow)

    def _run_many(self, runs: Sequence[tuple[str, Sequence]], name: str,
                  follow: Callable[[tether.Tethered], None] | None = None) -> None:
        """The commands ``runs`` (``(log name, [python, "-m", MODULE, ...])``, in order) in one
        child process (`infra.one_process`: each as its own command would run, its output in
        ``logs/<log name>.log``; the imports paid once), that child's own output in
        ``logs/<name>.log``; a single command as `_run` runs it."""
        if len(runs) == 1:
            return self._run(*runs[0], follow=follow)
        from soft_spatial.infra.one_process import Run, command_line

        line = command_line([Run(str(cmd[2]), tuple(map(str, cmd[3:])), self.logs / f"{n}.log")
                             for n, cmd in runs])
        self._run(name, [sys.executable, "-m", "soft_spatial.infra.one_process", *line],
                  follow=follow)

    def start(self, stage: Keyed) -> Verdict:
        """Before a stage makes its output: whether it is to run (its output absent, incomplete
        or made again). A stage that keeps its output across runs records its key first (its
        resume then belongs to it); the output of a redone stage is removed first."""
        verdict = stage.verdict()
        if verdict is Verdict.REDO:
            _remove(stage.output)
            stage.key_path.unlink(missing_ok=True)
        if not stage.derived:
            stage.record()
        return verdict

    @staticmethod
    def finish(stage: Keyed) -> None:
        """After a derived stage completed: its key, which says it is complete."""
        if stage.derived:
            stage.record()

    # -- the keys ------------------------------------------------------------------------------
    def data_stage(self) -> Keyed:
        return keyed("1 data", self.data, {"seed": self.cfg.seed, **asdict(self.cfg.data)})

    def model_stage(self) -> Keyed:
        c = self.cfg
        return keyed("2 model", self.init_model, {"seed": c.seed, "tasks": c.data.tasks, **asdict(c.model)})

    def warm_dir(self, view: str) -> Path:
        """The warm start of ``view``: ``models/warmstart`` for the first view, else
        ``models/warmstart_<view>``."""
        return self.warm if view == self.cfg.warmstart.views[0] else self.warm.with_name(
            f"warmstart_{view}")

    def warm_stage(self, view: str) -> Keyed:
        w = self.cfg.warmstart
        return keyed(f"3 warm start {view}", self.warm_dir(view),
                     {**w.weight_settings(), "view": view, "seed": self.cfg.seed},
                     data=self.data_stage(), model=self.model_stage())

    def parquet_stage(self) -> Keyed:
        return keyed("4 parquet", self.parquet, {}, data=self.data_stage(),
                     processor=self.warm_stage(self.cfg.warmstart.views[0]))

    def eval_stage(self, name: str, model: Keyed, mode: str, controller: bool = False,
                   extra: Sequence[str] = (), trained: bool = False) -> Keyed:
        """An evaluation of ``model``, made again when ``eval.samples`` changed (a row's text
        depends on the rows decoded with it, so the evaluation's own key holds ``samples``: more
        samples cannot extend a run) and, a trained policy's, when the policy changed."""
        e = self.cfg.eval
        return keyed(f"eval {name}", self.out / "eval" / name, {
            "mode": mode, "controller": controller, "extra": list(extra),
            "temperature": e.temperature, "max_new_tokens": e.max_new_tokens,
            "seed": self.cfg.seed, "samples": e.samples},
            ("settings.samples",) + (("settings.inputs.model.",) if trained else ()),
            data=self.data_stage(), model=model)

    def before_stage(self, mode: str) -> Keyed:
        name = f"warmstart_{BEFORE_MODE[EVAL_MODE[mode]]}"
        name += f"_{self.cfg.high_tau:g}" if mode == "soft_fixed_hi" else ""
        return self.eval_stage(name, self.warm_stage(self.cfg.warmstart.views[0]),
                               BEFORE_MODE[EVAL_MODE[mode]], extra=self.arm_overrides(mode))

    def entropy_stage(self) -> Keyed | None:
        c = self.cfg
        if c.entropy_prompts <= 0 or "adaptsoft" not in c.modes:
            return None
        return keyed("5e entropy", self.out / "stats" / "entropy.yaml",
                     {"prompts": c.entropy_prompts, "train_overrides": c.train.overrides},
                     warm=self.warm_stage(c.warmstart.views[0]), parquet=self.parquet_stage())

    def train_stage(self, mode: str) -> Keyed:
        """A training run's identity (not ``train.steps``: a run trained further keeps it, as
        ``python -m soft_spatial.train`` resumes it; not ``train.save_freq``)."""
        c = self.cfg
        entropy = self.entropy_stage() if mode == "adaptsoft" else None
        return keyed(f"6 train {mode}", self.out / "runs" / mode / "checkpoints", {
            "mode": mode, "preset": PRESET.get(mode, mode), "seed": c.seed,
            "arm": self.arm_overrides(mode), "overrides": c.train.overrides},
            warm=self.warm_stage(c.warmstart.views[0]), parquet=self.parquet_stage(),
            **({"entropy": entropy} if entropy else {}))

    def export_stage(self, mode: str) -> Keyed:
        return keyed(f"6 export {mode}", self.out / "runs" / mode / "final",
                     {"step": self.cfg.train.steps}, ANY, train=self.train_stage(mode))

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
        return keyed("7 report", self.out / "report.md", {"seed": c.seed, "budget": c.budget_name},
                     ANY, **inputs)

    def analysis_stage(self) -> Keyed:
        return keyed("8 analysis", self.out / "analysis", {}, ANY,
                     after=self.after_stages("adaptsoft")[0])

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
        """The step of the run's latest verl checkpoint (0 without one; a garbled tracker refused)."""
        try:
            return latest_step(self.out / "runs" / mode / "checkpoints") or 0
        except ValueError as e:
            raise OutputKeyMismatch(str(e)) from None

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
        if self.start(stage) is Verdict.SAME and (self.data / "OmniSpatial-test" / "data.json").is_file():
            return self.say("1 data: done")
        d = self.cfg.data
        tmp = self.data.with_name("data.tmp")
        _remove(tmp)
        self.say(f"1 data: synthetic benchmark, {d.train} train / {d.test} test questions "
                 f"(log {self.logs / 'data.log'})")
        self._run("data", [
            sys.executable, "-m", "soft_spatial.data.synthetic", "--out", tmp, "--train", d.train,
            "--test", d.test, "--seed", self.cfg.seed, "--size", d.size, "--options",
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
        if self.start(stage) is Verdict.SAME and (self.init_model / "config.json").is_file():
            return self.say("2 model: done")
        m = self.cfg.model
        self.say(f"2 model: tiny Qwen3-VL, hidden {m.hidden_size}, {m.num_hidden_layers} layers")
        _remove(self.init_model)  # an incomplete build of these settings
        self.build_model(self.init_model)

    def make_warmstart(self) -> None:
        """The views' warm starts not made yet, in one child process when there are several
        (`_run_many`)."""
        w = self.cfg.warmstart
        knobs = [f"{f.name}={'null' if getattr(w, f.name) is None else getattr(w, f.name)}"
                 for f in fields(WarmStartSettings)]  # every knob, none left to a default
        runs = []
        for view in w.views:
            stage = self.warm_stage(view)
            out, name = stage.output, stage.output.name
            if self.start(stage) is Verdict.SAME and (out / "model.safetensors").is_file():
                self.say(f"3 warm start {view}: done")
                continue
            self.say(f"3 warm start {view}: {w.steps} supervised steps of {w.batch_size}, lr "
                     f"{w.lr} (log {self.logs / (name + '.log')})")
            runs.append((name, [
                sys.executable, "-m", "soft_spatial.lab.learning.warmstart",
                f"model_path={self.init_model}", f"data_root={self.data}", f"output_dir={out}",
                *knobs, f"view={view}", f"seed={self.cfg.seed}"]))
        if runs:
            logs = [self.logs / f"{name}.log" for name, _ in runs]
            self._run_many(runs, "warmstarts",
                           follow=lambda child: follow_log(self.say, child, logs, "warm start step"))

    def make_parquet(self) -> None:
        self.start(self.parquet_stage())
        self.parquet.mkdir(parents=True, exist_ok=True)
        splits = [s for s in ("train", "test") if not (self.parquet / f"{s}.parquet").is_file()]
        if not splits:
            return
        self.say(f"4 parquet: {', '.join(splits)}")
        tmps = {s: self.parquet / f"{s}.tmp.parquet" for s in splits}
        also = [a for s in splits[1:] for a in ("--also", s, tmps[s])]
        # both splits in one process: its imports and the processor once (about 6 s of CPU each)
        self._run("prepare", [
            sys.executable, "-m", "soft_spatial.data.prepare", "--benchmark", "omnispatial",
            "--root", self.data, "--split", splits[0], "--out", tmps[splits[0]], *also,
            "--processor", self.warm, "--max-pixels", "0"])
        for s in splits:
            os.replace(tmps[s], self.parquet / f"{s}.parquet")

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
        return self.evaluate_many([(stage, model, controller)])[0]

    def evaluate_many(self, evals: Sequence[tuple[Keyed, Path, Path | None]],
                      name: str = "evals") -> list[Path]:
        """The evaluations ``evals`` (``(stage, model, controller)``; each skipped when complete
        under its key), those to make in one child process (`_run_many`; its own log
        ``logs/<name>.log``, each evaluation's ``logs/eval_<its name>.log``); their directories."""
        e = self.cfg.eval
        n = self.cfg.data.test * e.samples
        runs = []
        for stage, model, controller in evals:
            out = stage.output
            settings = stage.key["settings"]
            summary = out / "summary.json"
            if self.start(stage) is Verdict.SAME and summary.is_file() and json.loads(
                    summary.read_text())["benchmarks"]["omnispatial"]["samples"] == n:
                continue
            self.say(f"  eval {out.name} ({settings['mode']}, mean@{e.samples} over "
                     f"{self.cfg.data.test} questions)")
            runs.append((f"eval_{out.name}", [
                sys.executable, "-m", "soft_spatial.eval", "benchmarks=[omnispatial]",
                f"data.omnispatial={self.data}", f"model.path={model}", f"model.name={out.name}",
                f"mode={settings['mode']}",
                f"controller={controller if controller else 'null'}", f"samples={e.samples}",
                f"temperature={e.temperature}", f"max_new_tokens={e.max_new_tokens}",
                f"seed={self.cfg.seed}", f"output_dir={out}", *settings["extra"]]))
        if runs:
            self._run_many(runs, name)
        return [stage.output for stage, _, _ in evals]

    def entropy_overrides(self) -> list[str]:
        """μ_H/σ_H of the arms' warm start (``python -m soft_spatial.stats entropy`` on the
        training prompts, the untrained controller's τ₀), as training overrides."""
        stage = self.entropy_stage()
        if stage is None:
            return []
        out, n = stage.output, self.cfg.entropy_prompts
        if not (self.start(stage) is Verdict.SAME and out.is_file()):
            self.say(f"5e entropy: mu_H, sigma_H of the warm start over {n} prompts")
            self._run("entropy", [
                sys.executable, "-m", "soft_spatial.stats", "entropy", "--prompts", n, "--name",
                "warmstart", "--out", out, "--work-dir", self.out / "stats" / "work", "--no-progress",
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
        if self.start(stage) is Verdict.SAME and self.trained_steps(mode) >= t.steps:
            self.say(f"6 train {mode}: done")
            return ckpt
        self.say(f"6 train {mode}: {t.steps} GRPO steps through verl "
                 f"(log {self.logs / ('train_' + mode + '.log')})")
        cmd = [
            sys.executable, "-m", "soft_spatial.train", "model=tiny", "cluster=cpu",
            "recipe=synthetic_cpu", f"experiment={PRESET.get(mode, mode)}", f"model.path={self.warm}",
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
                  follow=lambda child: follow_metrics(self.say, child, ckpt / "metrics.jsonl", mode,
                                                     t.steps))
        return ckpt

    def merge(self, mode: str, ckpt: Path) -> Path:
        """The final checkpoint as one model directory (``python -m soft_spatial.export``:
        verl's merger, the controller and the run's soft settings)."""
        stage = self.export_stage(mode)
        if self.start(stage) is Verdict.SAME and stage.output.is_dir():
            return stage.output
        self._run(f"export_{mode}", [sys.executable, "-m", "soft_spatial.export", ckpt, stage.output,
                                     "--overwrite"])
        self.finish(stage)
        return stage.output

    def report(self, runs: dict) -> dict:
        """``report.md``, ``results.json`` and the figures (made again when an input changed)."""
        from soft_spatial.lab.learning.report import run_tau0, write_report

        stage = self.report_stage()
        results = self.out / "results.json"
        if self.start(stage) is Verdict.SAME and results.is_file() and stage.output.is_file():
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
        if self.start(stage) is Verdict.SAME and stage.output.is_dir():
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


def main(prog: str = PROG, before_grpo: BeforeGRPO | None = None) -> None:
    """The command ``prog`` over Hydra's command line (``configs/learning/learn.yaml`` and its
    overrides): this experiment, with ``before_grpo``'s stages when a command built on it hands
    them over."""
    import hydra

    @hydra.main(config_path=str(CONFIG_DIR), config_name="learn", version_base=None)
    def _main(cfg) -> None:
        try:  # a bad setting: refused before anything is written
            config = LearnConfig.from_omegaconf(cfg)
            config.check_command(prog)
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
