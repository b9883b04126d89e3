"""The learning experiment: ``python -m soft_spatial.lab.learn [budget=full] [seed=S]``.

Does GRPO with soft thinking and AdaptSoft learn? On a laptop-class CPU, end to end through the
real entry points (config: ``configs/learn.yaml``; ``budget=demo`` trains adaptsoft only,
``budget=full`` compares ``hard``, ``soft_fixed`` and ``adaptsoft``)::

    1 data       python -m soft_spatial.data.synthetic        -> out/data (OmniSpatial layout)
    2 model      a tiny Qwen3-VL (small BPE knowing the benchmark's words)  -> out/models/init
    3 warmstart  python -m soft_spatial.lab.warmstart (PyTorch loop) -> out/models/warmstart
    4 parquet    python -m soft_spatial.data.prepare (train, test)      -> out/parquet
    5 eval       python -m soft_spatial.eval of the warm start, per decoding mode
    6 per mode   python -m soft_spatial.train recipe=synthetic_cpu experiment=<mode>
                 -> python -m soft_spatial.export -> python -m soft_spatial.eval of the trained policy
    7 report     out/report.md (table with 95% CIs, per category, the checks of issue 11),
                 out/reward.png, out/tau.png, out/results.json
    8 analysis   python -m soft_spatial.analysis all on the adaptsoft run -> out/analysis

``budget=paths`` is the softness experiment (docs/learning.md): the path-tracking questions, three
warm starts (two-view ``mix``, hard-only, no-chain; lab/path_views.py), and before any GRPO
Phase 0's gates (5g below, lab/gates.py: the warm starts decoded hard and at fixed τ 0.1/0.5/0.9)
-> out/gates.md. A failed gate stops the run before GRPO (the registered rule). Its arms
(``modes=[hard,soft_fixed,soft_fixed_hi,adaptsoft]``) start from the two-view warm start; the
adaptsoft arm's μ_H/σ_H are re-estimated on that warm start first (``python -m soft_spatial.stats
entropy`` -> out/stats/entropy.yaml).

Every stage leaves its output under ``out`` and is skipped when the command runs again; training
resumes from its last verl checkpoint and evaluation from its JSONL, so an interrupted run picks
up where it stopped. Logs of every subprocess are in ``out/logs``; training progress (reward,
accuracy, τ range per step) is printed as the steps finish.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from soft_spatial.data import synthetic
from soft_spatial.data.prompt import SYSTEM_PROMPT
from soft_spatial.data.synthetic import PATH_TASKS, corpus, path_phrases, read_rows
from soft_spatial.lab.analysis.cli import main as analysis
from soft_spatial.lab.branches import accuracy_by, branch_readouts
from soft_spatial.lab.gates import GATE_EVALS, measure_gates, write_gates
from soft_spatial.lab.report import read_metrics, write_report
from soft_spatial.models import build_tiny_model
from soft_spatial.softthink import from_mapping
from soft_spatial.softthink.settings import CONTROLLER_FILE, SoftSettings, settings_file

__all__ = ["LearnConfig", "Experiment", "EVAL_MODE", "main"]

CONFIG_DIR = Path(__file__).resolve().parents[2] / "configs"
#: arm -> the decoding mode its policy is evaluated in
EVAL_MODE = {"hard": "hard", "soft_fixed": "fixed", "soft_fixed_hi": "fixed",
             "adaptsoft": "adaptsoft"}
#: arm -> its training preset (configs/experiment/), where the two differ
PRESET = {"soft_fixed_hi": "soft_fixed"}
#: the warm start evaluated in each decoding mode; adaptsoft's untrained controller gives τ = τ₀
#: exactly (zero output layer, a = b = 0), so its "before" is the fixed-τ₀ evaluation
BEFORE_MODE = {"hard": "hard", "fixed": "fixed", "adaptsoft": "fixed"}


@dataclass
class DataSpec:
    train: int = 8000
    test: int = 300
    size: int = 96
    options: list[int] = field(default_factory=lambda: [4])
    difficulty: str = "medium"
    describe: bool = True
    option_order: str = "canonical"
    tasks: list[str] = field(default_factory=lambda: ["mental_rotation", "counting"])


@dataclass
class ModelSpec:
    hidden_size: int = 128
    intermediate_size: int = 256
    num_hidden_layers: int = 4
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    head_dim: int = 32
    vision_hidden_size: int = 64
    vision_depth: int = 2
    bpe_size: int = 640
    system_prompt_token: bool = True
    init_std: float = 0.02


@dataclass
class WarmStartSpec:
    steps: int = 600
    batch_size: int = 32
    lr: float = 2e-3
    answer_weight: float = 10.0
    noise: float = 0.3
    views: list[str] = field(default_factory=lambda: ["hard"])
    """The warm starts to train, one per view (lab/path_views.py: hard, mix, nochain); the
    first is the arms' start."""
    overrides: list[str] = field(default_factory=list)


@dataclass
class TrainSpec:
    steps: int = 40
    save_freq: int = 10
    overrides: list[str] = field(default_factory=list)


@dataclass
class EvalSpec:
    samples: int = 4
    temperature: float = 1.0
    max_new_tokens: int = 32


@dataclass
class LearnConfig:
    """Typed form of ``configs/learn.yaml``."""

    out: str
    seed: int = 0
    modes: list[str] = field(default_factory=lambda: ["adaptsoft"])
    budget_name: str = "demo"
    data: DataSpec = field(default_factory=DataSpec)
    model: ModelSpec = field(default_factory=ModelSpec)
    warmstart: WarmStartSpec = field(default_factory=WarmStartSpec)
    train: TrainSpec = field(default_factory=TrainSpec)
    eval: EvalSpec = field(default_factory=EvalSpec)
    gates: bool = False
    """Phase 0 of the softness experiment before any GRPO: evaluate the warm starts of views
    mix, hard and nochain and apply the registered gates (lab/gates.py); a failed gate stops
    the run before the arms."""
    high_tau: float = 0.9
    """τ of the ``soft_fixed_hi`` arm (the control for a higher mean τ) and of gate G2."""
    entropy_prompts: int = 0
    """Prompts the adaptsoft arm's μ_H/σ_H are re-estimated on, on the arms' warm start
    (budget=paths: 128); 0 keeps the configured values (the 8B model's)."""

    def __post_init__(self):
        unknown = [m for m in self.modes if m not in EVAL_MODE]
        if unknown or not (self.modes or self.gates):
            raise ValueError(f"learn: modes must be among {list(EVAL_MODE)}, got {self.modes}")
        if self.gates and not {"mix", "hard", "nochain"} <= set(self.warmstart.views):
            raise ValueError(f"learn: gates need the warm starts of views mix, hard and nochain, "
                             f"got warmstart.views={self.warmstart.views}")

    @classmethod
    def from_omegaconf(cls, cfg) -> "LearnConfig":
        from omegaconf import OmegaConf


        raw = OmegaConf.to_container(cfg, resolve=True)
        subs = {"data": DataSpec, "model": ModelSpec, "warmstart": WarmStartSpec,
                "train": TrainSpec, "eval": EvalSpec}
        for key, typ in subs.items():
            raw[key] = from_mapping(typ, raw.get(key), key)
        return from_mapping(cls, raw, "learn")


def _python() -> list[str]:
    return [sys.executable]


def _stop_group(proc: subprocess.Popen, grace_s: float = 20.0) -> None:
    """Terminate ``proc`` (if still running) and every process left in its session (Ray's
    workers), first with SIGTERM, then SIGKILL after ``grace_s``."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        deadline = time.time() + grace_s
        while time.time() < deadline:
            proc.poll()
            try:
                os.killpg(proc.pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.5)
    proc.wait()


def run_tau0(runs) -> float:
    """τ₀ of the adaptsoft run (its settings file beside the checkpoints; the default without
    one): the report's reference line for τ."""
    found = settings_file(runs["adaptsoft"]["metrics"].parent) if "adaptsoft" in runs else None
    return (SoftSettings.load(found) if found else SoftSettings()).adaptsoft.tau0


def _raise_on_sigterm(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


class Experiment:
    """The stages of the learning experiment over one output directory (module docstring)."""

    def __init__(self, cfg: LearnConfig):
        self.cfg = cfg
        self.out = Path(cfg.out).resolve()
        self.logs = self.out / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
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
             follow: Callable[[subprocess.Popen], None] | None = None) -> None:
        """Run a stage's command in its own session with its output in ``logs/<name>.log``
        (``follow(proc)`` watches it meanwhile); whatever it leaves running is stopped, also
        when this process is interrupted. Raise with the log's tail on failure."""
        log = self.logs / f"{name}.log"
        with log.open("a") as f:
            f.write(f"\n$ {' '.join(map(str, cmd))}\n")
            f.flush()
            proc = subprocess.Popen(list(map(str, cmd)), stdout=f, stderr=subprocess.STDOUT,
                                    env=env or self.env, cwd=CONFIG_DIR.parent,
                                    start_new_session=True)
            try:
                if follow is not None:
                    follow(proc)
                proc.wait()
            finally:  # e.g. Ray's workers share the session: stop what is left
                _stop_group(proc)
        if proc.returncode != 0:
            tail = "".join(log.read_text(errors="replace").splitlines(True)[-30:])
            raise RuntimeError(f"{name} failed (exit {proc.returncode}); log {log}:\n{tail}")

    # -- stages --------------------------------------------------------------------------------
    def make_data(self) -> None:

        if (self.data / "OmniSpatial-test" / "data.json").is_file():
            return self.say("1 data: done")
        d = self.cfg.data
        args = ["--out", self.data, "--train", d.train, "--test", d.test, "--seed",
                self.cfg.seed, "--size", d.size, "--options", ",".join(map(str, d.options)),
                "--difficulty", d.difficulty, "--option-order", d.option_order,
                "--tasks", ",".join(d.tasks)] + (
                    ["--describe"] if d.describe else [])
        self.say(f"1 data: synthetic benchmark, {d.train} train / {d.test} test questions")
        synthetic.main([str(a) for a in args])

    def make_model(self) -> None:

        if (self.init_model / "config.json").is_file():
            return self.say("2 model: done")
        m = self.cfg.model
        self.say(f"2 model: tiny Qwen3-VL, hidden {m.hidden_size}, {m.num_hidden_layers} layers")
        tmp = self.init_model.with_name("init.tmp")
        build_tiny_model(
            tmp, family="qwen3_vl", vocab="small", seed=self.cfg.seed, corpus=corpus(tasks=self.cfg.data.tasks),
            bpe_size=m.bpe_size, phrases=([SYSTEM_PROMPT] if m.system_prompt_token else [])
            + path_phrases(self.cfg.data.tasks),
            hidden_size=m.hidden_size,
            intermediate_size=m.intermediate_size, num_hidden_layers=m.num_hidden_layers,
            num_attention_heads=m.num_attention_heads, num_key_value_heads=m.num_key_value_heads,
            head_dim=m.head_dim, init_std=m.init_std, head_init_std=m.init_std, vision_config={
                "hidden_size": m.vision_hidden_size, "intermediate_size": 2 * m.vision_hidden_size,
                "depth": m.vision_depth, "out_hidden_size": m.hidden_size})
        os.replace(tmp, self.init_model)

    def warm_dir(self, view: str) -> Path:
        """The warm start of ``view``: ``models/warmstart`` for the first view, else
        ``models/warmstart_<view>``."""
        return self.warm if view == self.cfg.warmstart.views[0] else self.warm.with_name(
            f"warmstart_{view}")

    def make_warmstart(self) -> None:
        w = self.cfg.warmstart
        for view in w.views:
            out = self.warm_dir(view)
            name = out.name
            if (out / "model.safetensors").is_file():
                self.say(f"3 warm start {view}: done")
                continue
            self.say(f"3 warm start {view}: {w.steps} supervised steps of {w.batch_size}, lr "
                     f"{w.lr} (log {self.logs / (name + '.log')})")
            self._run(name, _python() + [
                "-m", "soft_spatial.lab.warmstart", f"model_path={self.init_model}",
                f"data_root={self.data}", f"output_dir={out}", f"steps={w.steps}",
                f"batch_size={w.batch_size}", f"lr={w.lr}", f"answer_weight={w.answer_weight}",
                f"noise={w.noise}", f"view={view}", f"seed={self.cfg.seed}", *w.overrides],
                follow=lambda proc, name=name: self._follow_log(
                    proc, self.logs / f"{name}.log", "warm start step"))

    def make_parquet(self) -> None:
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

    def evaluate(self, name: str, model: Path, mode: str, controller: Path | None = None,
                 extra: Sequence[str] = ()) -> Path:
        """``python -m soft_spatial.eval`` on the test split (resumable; ``extra``: more
        overrides); returns its directory."""
        e = self.cfg.eval
        out = self.out / "eval" / name
        summary = out / "summary.json"
        n = self.cfg.data.test * e.samples
        if summary.is_file() and json.loads(summary.read_text())["benchmarks"]["omnispatial"][
                "samples"] == n:
            return out
        self.say(f"  eval {name} ({mode}, mean@{e.samples} over {self.cfg.data.test} questions)")
        self._run(f"eval_{name}", _python() + [
            "-m", "soft_spatial.eval", "benchmarks=[omnispatial]", f"data.omnispatial={self.data}",
            f"model.path={model}", f"model.name={name}", f"mode={mode}",
            f"controller={controller if controller else 'null'}", f"samples={e.samples}",
            f"temperature={e.temperature}", f"max_new_tokens={e.max_new_tokens}",
            f"seed={self.cfg.seed}", f"output_dir={out}", *extra])
        return out

    def gates(self) -> dict:
        """Phase 0: the warm starts evaluated as :data:`~soft_spatial.lab.gates.GATE_EVALS` asks,
        and the registered gates applied -> ``gates.md``, ``gates.json``."""
        self.say("5g gates: the warm starts before any GRPO")
        evals = {}
        for name, (view, mode, tau) in GATE_EVALS.items():
            extra = [f"soft_thinking.fixed_tau={tau}"] if tau is not None else []
            evals[name] = self.evaluate(f"gate_{name}", self.warm_dir(view), mode, extra=extra)
        rows = read_rows(self.data / "OmniSpatial-test")
        result = measure_gates(evals, rows)
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(self.warm)
        result["branches"] = {n: branch_readouts(d, rows, tok) for n, d in evals.items()
                              if GATE_EVALS[n][1] == "fixed"}
        result["by_t_star"] = {n: accuracy_by(Path(d) / "samples.jsonl", rows)["t_star"]
                               for n, d in evals.items()}
        write_gates(self.out, result)
        print((self.out / "gates.md").read_text(), flush=True)
        return result

    def entropy_overrides(self) -> list[str]:
        """μ_H/σ_H of the arms' warm start (``python -m soft_spatial.stats entropy`` on the
        training prompts, the untrained controller's τ₀), as training overrides."""
        n = self.cfg.entropy_prompts
        if n <= 0:
            return []
        out = self.out / "stats" / "entropy.yaml"
        if not out.is_file():
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
        """GRPO through ``python -m soft_spatial.train``; returns the checkpoint directory."""
        t = self.cfg.train
        run = self.out / "runs" / mode
        ckpt = run / "checkpoints"
        latest = ckpt / "latest_checkpointed_iteration.txt"
        if latest.is_file() and int(latest.read_text()) >= t.steps:
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
                  follow=lambda proc: self._follow(proc, ckpt / "metrics.jsonl", mode, t.steps))
        return ckpt

    def _follow_log(self, proc, log: Path, prefix: str) -> None:
        """Echo the lines of ``log`` that start with ``prefix`` while ``proc`` runs."""
        pos = log.stat().st_size if log.is_file() else 0
        while True:
            done = proc.poll() is not None
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

    def _follow(self, proc, metrics: Path, mode: str, steps: int) -> None:
        """Print one line per finished training step while ``proc`` runs."""

        seen, last = set(), time.time()
        while True:
            done = proc.poll() is not None
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
        step = int((ckpt / "latest_checkpointed_iteration.txt").read_text())
        final = self.out / "runs" / mode / "final"
        marker = final / "merged_from.txt"
        if marker.is_file() and marker.read_text().strip() == str(step):
            return final
        self._run(f"export_{mode}", _python() + [
            "-m", "soft_spatial.export", ckpt, final, "--overwrite"])
        marker.write_text(str(step))
        return final

    def analyse(self, run: dict) -> None:
        """The paper's Figs. 4-7 for the trained adaptsoft policy (``python -m
        soft_spatial.analysis all``) under ``out/analysis``."""

        self.say("8 analysis: python -m soft_spatial.analysis all (adaptsoft)")
        analysis(["all", "--metrics", str(run["metrics"]), "--eval", str(run["after"]),
                  "--out", str(self.out / "analysis"), "--min-steps", "3"])

    def _before_name(self, mode: str) -> str:
        name = f"warmstart_{BEFORE_MODE[EVAL_MODE[mode]]}"
        return name + f"_{self.cfg.high_tau:g}" if mode == "soft_fixed_hi" else name

    def run(self) -> dict:

        c = self.cfg
        self.say(f"learning experiment, budget {c.budget_name}, seed {c.seed}, modes "
                 f"{', '.join(c.modes)}; output {self.out}")
        self.make_data()
        self.make_model()
        self.make_warmstart()
        self.make_parquet()
        if c.gates and not self.gates()["passed"]:
            self.say(f"a gate failed (table {self.out / 'gates.md'}): the registered rule stops "
                     f"the protocol before GRPO")
            return {"gates": json.loads((self.out / "gates.json").read_text())}
        if not c.modes:
            return self.say("done: no arms asked for")
        self.say("5 eval: the warm start")
        before = {m: self.evaluate(self._before_name(m), self.warm, BEFORE_MODE[EVAL_MODE[m]],
                                   extra=self.arm_overrides(m)) for m in c.modes}
        entropy = self.entropy_overrides() if "adaptsoft" in c.modes else []
        paths = any(t in PATH_TASKS for t in c.data.tasks)
        runs = {}
        for mode in c.modes:
            ckpt = self.train(mode, entropy if mode == "adaptsoft" else ())
            final = self.merge(mode, ckpt)
            after = self.evaluate(f"{mode}_trained", final, EVAL_MODE[mode],
                                  final / CONTROLLER_FILE if EVAL_MODE[mode] == "adaptsoft" else None,
                                  extra=self.arm_overrides(mode))
            if paths and EVAL_MODE[mode] != "hard":  # the causal test: the soft policy decoded hard
                self.evaluate(f"{mode}_trained_hard", final, "hard")
            runs[mode] = {"before": before[mode], "after": after,
                          "metrics": ckpt / "metrics.jsonl"}
        self.say("7 report")
        results = write_report(self.out, runs, self.data, tau0=run_tau0(runs),
                               seed=c.seed, budget=c.budget_name)
        print((self.out / "report.md").read_text())
        if "adaptsoft" in runs:
            self.analyse(runs["adaptsoft"])
        self.say(f"done: table {self.out / 'report.md'}, reward curve "
                 f"{self.out / 'reward.png'}, tau diagnostics {self.out / 'tau.png'}")
        return results


def main() -> None:
    import hydra

    @hydra.main(config_path=str(CONFIG_DIR), config_name="learn", version_base=None)
    def _main(cfg) -> None:
        signal.signal(signal.SIGTERM, _raise_on_sigterm)  # clean up the stage's processes
        Experiment(LearnConfig.from_omegaconf(cfg)).run()

    _main()


if __name__ == "__main__":
    main()
