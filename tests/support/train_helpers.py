"""Helpers of the training tests: compose the training config, prepare verl parquet from the
OmniSpatial fixture, run ``python -m soft_spatial.train`` and check one step's metrics; the lines
verl's file logger writes to ``metrics.jsonl``."""
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from hydra import compose, initialize_config_dir

from soft_spatial.train import CONFIG_DIR

ROOT = Path(__file__).resolve().parents[2]


def compose_train(*overrides):
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
        return compose(config_name="train", overrides=list(overrides))


def prepare_train_data(root, model):
    """verl parquet (train/test) from the OmniSpatial fixture, tokenised for ``model``."""
    from soft_spatial.data.fixtures import write_fixtures
    from soft_spatial.data.prepare import main as prepare
    fx = write_fixtures(root / "fixtures")
    for split in ("train", "test"):
        prepare(["--benchmark", "omnispatial", "--root", str(fx.omnispatial), "--split", split,
                 "--out", str(root / f"{split}.parquet"), "--processor", str(model)])
    return root


# the subprocess timeout only bounds a hang: a training run took > 600 s with both cores busy
def run_train(model, data, out, *overrides, timeout=1800, env=None, ok=True):
    """Train into ``out/ckpt`` (metrics in ``out/metrics.jsonl``); the metrics logged. ``ok``:
    assert exit status 0 (else assert a failure)."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", RAY_USAGE_STATS_ENABLED="0",
               VERL_FILE_LOGGER_PATH=str(out / "metrics.jsonl"), **(env or {}))
    res = subprocess.run(train_command(model, data, out, *overrides), capture_output=True,
                         text=True, timeout=timeout, env=env, cwd=ROOT)
    log = res.stdout + res.stderr
    with open(out / "train.log", "a") as f:
        f.write(log)
    assert (res.returncode == 0) == ok, log[-4000:]
    return logged_metrics(out)


def train_command(model, data, out, *overrides) -> list[str]:
    """``python -m soft_spatial.train`` on the CPU preset with the tiny model, training into
    ``out/ckpt`` on the fixture's parquet with the smoke reward, and ``overrides``."""
    return [sys.executable, "-m", "soft_spatial.train", "model=tiny", "cluster=cpu",
            f"model.path={model}", f"data.train_files={data / 'train.parquet'}",
            f"data.val_files={data / 'test.parquet'}", f"trainer.default_local_dir={out / 'ckpt'}",
            f"reward.custom_reward_function.path={ROOT / 'tests' / 'support' / 'smoke_reward.py'}",
            *overrides]


def logged_metrics(out: Path) -> list[dict]:
    """``out/metrics.jsonl`` (verl's file logger), one dict per line: its data and its step."""
    return [json.loads(line)["data"] | {"step": json.loads(line)["step"]}
            for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]


#: the run-life test's first run, which the signalled run repeats and compares (one start-up each):
#: 2 adaptsoft steps on one rank (one rollout server sees each whole batch: reproducible rows), a
#: checkpoint at step 2, TensorBoard, validation generations at step 2, verl's rollout dumps and
#: the smoke reward without its random tie-break (so that a second run can be compared bit for bit)
ADAPTSOFT_RUN = ("experiment=adaptsoft", "trainer.total_training_steps=2", "trainer.save_freq=2",
                 "trainer.n_gpus_per_node=1", "trainer.logger=[console,file,tensorboard]",
                 "trainer.test_freq=2", "trainer.log_val_generations=2",
                 "actor_rollout_ref.rollout.val_kwargs.n=1",
                 "reward.custom_reward_function.name=compute_score_deterministic")


@dataclass(frozen=True)
class TrainedRun:
    """A run of ``ADAPTSOFT_RUN`` as it was when read (when it ended, or held after its last
    checkpoint): its directory (``ckpt/``, ``metrics.jsonl``, ``tb/``, the dumps in ``r/``; a test
    may go on training there), its metrics and its rollout dumps ({file name: rows}) read then."""
    out: Path
    metrics: list
    dumps: dict


def adaptsoft_run_args(out: Path) -> tuple[tuple[str, ...], dict]:
    """The overrides and environment of ``ADAPTSOFT_RUN`` trained into ``out``."""
    return (*ADAPTSOFT_RUN, f"trainer.rollout_data_dir={out / 'r'}"), {"TENSORBOARD_DIR": str(out / "tb")}


def rollout_dumps(out: Path) -> dict:
    """verl's rollout dumps of a run in ``out`` (``trainer.rollout_data_dir=out/r``): {file: rows}."""
    return {p.name: [json.loads(x) for x in p.read_text().splitlines()]
            for p in sorted((out / "r").glob("*.jsonl"))}


def train_adaptsoft(model, data, out: Path) -> TrainedRun:
    overrides, env = adaptsoft_run_args(out)
    metrics = run_train(model, data, out, *overrides, env=env)
    return TrainedRun(out, metrics, rollout_dumps(out))


#: clocks: the metrics two identical runs need not share
CLOCKS = ("timing", "time", "perf/", "throughput", "memory", "alignment_s")


def assert_same_rollouts_and_metrics(a: TrainedRun, b: TrainedRun) -> None:
    """Two runs of ``ADAPTSOFT_RUN`` drew the same rollouts (texts and rewards, verl's dumps) at
    both steps, the second after an update, and logged the same training and validation metrics
    but for clocks."""
    assert sorted(a.dumps) == ["1.jsonl", "2.jsonl"]
    for step in a.dumps:  # the texts first (the rollouts), then everything dumped with them
        assert [r["output"] for r in a.dumps[step]] == [r["output"] for r in b.dumps[step]], step
        assert a.dumps[step] == b.dumps[step], step
    assert len({r["output"] for r in a.dumps["1.jsonl"]}) > 1  # the rows differ from each other
    for x, y in zip(a.metrics, b.metrics, strict=True):
        same = {k: v for k, v in x.items() if not any(t in k for t in CLOCKS)}
        assert same == {k: y[k] for k in same}
    assert any(k.startswith("val-") for k in a.metrics[-1])  # validation ran in both, the same


def assert_one_step(m: dict, preset: str) -> None:
    """What one training step of ``preset`` must show in its metrics (records and responses
    agree, or the step would have raised: the spine check), the policy got a GRPO gradient,
    soft steps replay exactly, and the controller (if any) moved."""
    assert "soft/spine_match_rate" not in m  # the spine check raises instead (integration/collate.py)
    assert m["actor/grad_norm"] > 0  # the policy got a GRPO gradient
    soft = preset != "hard"
    assert (m["soft/soft_step_fraction"] > 0) == soft
    if soft:
        assert m["soft/replay_max_abs_diff_soft"] < 1e-3  # rollout vs training likelihoods
    assert m["soft/replay_max_abs_diff"] < 1e-3 and m["soft/replay_check_exceeded"] == 0.0
    assert m["soft/replay_max_abs_diff_step0"] < 1e-3  # the prompt's step: prompt, vision, positions
    assert m.get("soft/replay_max_abs_diff_hard", 0.0) < 1e-3  # absent when every step was soft
    if preset in ("hard", "soft_fixed"):
        assert "actor/adaptsoft/grad_norm" not in m
    else:
        assert m["actor/adaptsoft/grad_finite"] == 1.0
        assert m["actor/adaptsoft/grad_norm"] > 0  # the controller was trained
        if preset != "no_alignment":
            assert m["actor/adaptsoft/alpha_rms"] > 0


def metrics_lines(steps, tag):
    """``metrics.jsonl`` lines of verl's file logger for ``steps``, each ``{"tag": tag}``."""
    return "".join(json.dumps({"step": s, "data": {"tag": tag}}) + "\n" for s in steps)
