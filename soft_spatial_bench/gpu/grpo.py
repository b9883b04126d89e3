"""E — GRPO through verl's trainer on one GPU with SGLang rollouts, trainer and rollout colocated
(verl's hybrid engine): ``python -m soft_spatial.train rollout=sglang`` as the plan's E jobs run
it, and the verdict of each.

One job is an :class:`ESpec`: the dtype of SGLang, the actor and the reference (``float32``:
SGLang in fp32 with native ops, Triton's dots in IEEE fp32 and TF32 off in cuBLAS/cuDNN in every
process, graphs on; the actor and reference with FSDP2's ``mixed_precision`` in fp32, where verl
0.9.1 skips autocast: ``FSDPEngine.forward_step`` enters ``torch.autocast`` only when
``param_dtype`` is not fp32, and ``model_dtype`` is fp32 by default); the weights (``tiny``: the
tiny defaults, std 0.1/0.5, whose logits reach ~100 at 2B width; ``parity``: F's and D's
``parity_init``, untied); the experiment (``adaptsoft``, or ``hard``: the same pipeline with
one-hot records, SGLang's plugin in hard mode; with ``stock`` verl's own SGLang rollout, actor
engine ``language_model``, loss ``vanilla`` and agent loop ``single_turn_agent`` — what a verl user
runs today, which ``soft_spatial.train``'s trainer cannot run yet: it requires the rollout's
records, :data:`STOCK_BLOCKED`); the steps, a resume, graphs, and extra Hydra overrides
(``headline --set``). On a GPU the model has Qwen3-VL-2B's widths with 4 language and 4
vision layers (``--quick``'s shape: a third of the bytes to move); in a dry run the tiny Qwen3-VL
on the CPU (fp32 whatever the dtype), SGLang's real engine, the same code path.

From the run's ``metrics.jsonl`` and controller logs:

* the verdict: the rollout/replay consistency split by the engine's metrics —
  ``soft/replay_max_abs_diff_soft`` (soft steps), ``_hard``, ``_step0`` (the first response
  step, whose input is the prompt alone: a large value there is a prompt, vision or position
  mismatch) and the whole; in fp32 each must be ≤ :data:`FP32_BOUND` (the CPU bound); a split
  the engine did not record is reported as "not recorded", never as passing. When fp32 fails
  (and in E/fp32's dry run), :mod:`.replay_inputs` names the first divergent step and compares
  the soft inputs tensor by tensor;
* the step time split, verl's ``timing_s/*`` and ``actor/adaptsoft/alignment_s``
  (``SOFT_SPATIAL_ALIGNMENT_CLOCK=1``), for the ratio to ``E/hard`` part by part;
* peak memory (verl's ``actor/perf/*``, ``nvidia-smi`` per process);
* the controller the trainer sent against the one the SGLang plugin installed, sync by sync
  (``SOFT_SPATIAL_CONTROLLER_LOG``), and the checkpoint's.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from soft_spatial_bench.gpu.report import JobFailed, Skip, table
from soft_spatial_bench.gpu.sglang_args import engine_env

__all__ = ["ESpec", "EResult", "measure", "render", "run", "train_command", "verdict", "FP32_BOUND",
           "REPLAY", "STOCK_OVERRIDES", "e_summary_rows", "step_price_rows", "smoke_reward_path"]

ROOT = Path(__file__).resolve().parents[2]
# verl's timing keys, in step order (verl 0.9.1 RayPPOTrainer.fit), with what each covers
TIMING = {"timing_s/gen": "rollout: SGLang generation (agent loop)",
          "timing_s/reward": "reward",
          "timing_s/old_log_prob": "old log-prob (replay of the records)",
          "timing_s/ref": "reference log-prob",
          "timing_s/adv": "advantages",
          "timing_s/update_actor": "actor update (alignment included)",
          "timing_s/save_checkpoint": "checkpoint",
          "timing_s/update_weights": "weight sync: SGLang memory resume, θ, controller",
          "timing_s/step": "whole step"}
ALIGNMENT = "actor/adaptsoft/alignment_s"
# the rollout/replay consistency, split by step kind (soft_spatial.integration.consistency)
REPLAY = {"soft/replay_max_abs_diff_soft": "soft steps",
          "soft/replay_max_abs_diff_hard": "hard steps",
          "soft/replay_max_abs_diff_step0": "step 0 (the prompt alone)",
          "soft/replay_max_abs_diff": "all steps"}
EXCEEDED = "soft/replay_check_exceeded"
# verl's own rollout/training comparison (mean log-prob difference as a KL estimate)
ROLLOUT_KL = "rollout_corr/kl"
MEMORY = ("actor/perf/max_memory_allocated_gb", "actor/perf/max_memory_reserved_gb",
          "actor/perf/cpu_memory_used_gb")
FP32_BOUND = 1e-3  # nats: fp32 on the CPU, SGLang's likelihoods = the trainer's (tests/sglang_real)
# fp32 end to end: the rollout's dtype, the actor's and reference's FSDP2 compute (verl skips
# autocast when param_dtype is fp32); "++": verl's config leaves mixed_precision unset
_FP32 = "{param_dtype:fp32,reduce_dtype:fp32,buffer_dtype:fp32}"
FP32_OVERRIDES = ["actor_rollout_ref.rollout.dtype=float32",
                  f"++actor_rollout_ref.actor.fsdp_config.mixed_precision={_FP32}",
                  f"++actor_rollout_ref.ref.fsdp_config.mixed_precision={_FP32}"]
# verl's stock hard GRPO with SGLang: its own rollout server, actor engine, loss and agent loop
STOCK_OVERRIDES = ["actor_rollout_ref.rollout.name=sglang",
                   "actor_rollout_ref.model.model_type=language_model",
                   "actor_rollout_ref.actor.policy_loss.loss_mode=vanilla",
                   "actor_rollout_ref.rollout.agent.default_agent_loop=single_turn_agent",
                   "actor_rollout_ref.rollout.engine_kwargs.sglang.sampling_backend=pytorch",
                   "~actor_rollout_ref.rollout.engine_kwargs.sglang.custom_weight_loader"]


STOCK_ENGINE = "actor_rollout_ref.model.model_type="
# found by the dry run (2026-11-28): verl's stock rollout returns no soft records, and
# soft_spatial.train's trainer (integration/ppo_trainer.py, _compute_old_log_prob ->
# collate.attach_traces) raises without them, in hard mode too
STOCK_BLOCKED = ("soft_spatial.train's trainer requires the rollout's soft records in every mode "
                 "(integration/ppo_trainer.py: _compute_old_log_prob -> collate.attach_traces "
                 "raises \"the batch has no 'soft_trace'\"), which verl's stock SGLang rollout "
                 "does not return; E/hard measures the same pipeline in hard mode instead")


def smoke_reward_path() -> Path:
    """The smoke reward's file (verl loads ``reward.custom_reward_function.path`` by path)."""
    from soft_spatial_bench.gpu import smoke_reward
    return Path(smoke_reward.__file__)


@dataclass(frozen=True)
class ESpec:
    """One E job (module docstring)."""

    dtype: str = "bfloat16"
    weights: str = "tiny"
    experiment: str = "adaptsoft"
    stock: bool = False
    steps: int = 2
    resume: bool = False
    graphs: bool = True
    overrides: tuple[str, ...] = field(default=())
    #: the diagnosis (replay_inputs) runs when the fp32 verdict fails; with this also in every
    #: dry run (the plan's E/fp32: its code path proven on the CPU)
    diagnose_dry: bool = False

    def __post_init__(self):
        if self.dtype not in ("bfloat16", "float32") or self.weights not in ("tiny", "parity"):
            raise ValueError(f"ESpec: dtype {self.dtype!r}, weights {self.weights!r}")
        if self.stock and self.experiment != "hard":
            raise ValueError("ESpec: stock verl trains hard only")
        if self.resume and self.steps < 2:
            raise ValueError("ESpec: a resume needs 2 steps")

    @classmethod
    def from_args(cls, a: dict) -> "ESpec":
        keys = ("dtype", "weights", "experiment", "stock", "steps", "resume", "graphs",
                "diagnose_dry")
        return cls(**{k: a[k] for k in keys if k in a}, overrides=tuple(a.get("overrides", ())))

    def runs(self) -> list[tuple[int, bool, list[int]]]:
        """(steps, save a checkpoint, the global steps of its weight syncs) per run: verl syncs
        once at start, then after every step."""
        if self.resume:
            return [(1, True, [0, 1]), (self.steps, False, list(range(1, self.steps + 1)))]
        return [(self.steps, False, list(range(0, self.steps + 1)))]

    @property
    def adaptsoft(self) -> bool:
        return self.experiment == "adaptsoft"


@dataclass
class EResult:
    """An E job's result: its runs (rc, seconds, command, peak memory per process), the steps verl
    logged and their time split, the syncs, the :func:`verdict`, the problems, the diagnosis."""

    spec: ESpec
    dry: bool
    build_s: float
    params_m: float
    runs: list = field(default_factory=list)
    commands: list = field(default_factory=list)
    memory: list = field(default_factory=list)
    log_tail: str | None = None
    steps: list = field(default_factory=list)
    sync_rows: list = field(default_factory=list)
    sync_equal: bool | None = None
    timing_rows: list = field(default_factory=list)
    timing: dict = field(default_factory=dict)
    memory_keys: list = field(default_factory=list)
    graph_batches: dict | None = None
    verdict: dict | None = None
    problems: list = field(default_factory=list)
    diagnosis: dict | None = None


def train_command(spec: ESpec, model: Path, data: Path, ckpt: Path, steps: int, save: bool,
                  dry: bool) -> list[str]:
    """``python -m soft_spatial.train`` for a run of ``spec`` to ``steps`` in ``ckpt`` (a resume
    when a checkpoint is there), saving a checkpoint after every step if ``save``."""
    cluster = ["cluster=cpu", "trainer.n_gpus_per_node=1",  # the suite's CPU training settings
               "actor_rollout_ref.actor.optim.lr=1e-3",
               "actor_rollout_ref.actor.optim.lr_warmup_steps_ratio=0"] if dry else ["cluster=gpu1"]
    cmd = [sys.executable, "-m", "soft_spatial.train", "model=tiny", "rollout=sglang",
           f"experiment={spec.experiment}", *cluster, f"model.path={model}",
           f"data.train_files={data / 'train.parquet'}", f"data.val_files={data / 'test.parquet'}",
           f"trainer.default_local_dir={ckpt}",
           f"reward.custom_reward_function.path={smoke_reward_path()}",
           f"trainer.total_training_steps={steps}", f"trainer.save_freq={1 if save else -1}"]
    if spec.dtype == "float32" and not dry:  # the dry run's cluster=cpu is fp32 already
        cmd += FP32_OVERRIDES
    if spec.stock:  # on the CPU verl's own actor engine pins memory (CUDA only): the soft engine,
        # which treats a batch without records exactly as verl's, stands in for it there
        cmd += [o for o in STOCK_OVERRIDES if not (dry and o.startswith(STOCK_ENGINE))]
    if not spec.graphs:
        cmd.append("actor_rollout_ref.rollout.enforce_eager=true")
    return cmd + list(spec.overrides)


class GpuMemorySampler:
    """Peak device memory per process (MiB) from ``nvidia-smi``, sampled every ``interval`` s in a
    thread while the block runs; ``peaks`` stays empty where nvidia-smi is missing or shows no
    processes (a container's PID namespace). ``names``: each pid's command line when first seen."""

    def __init__(self, interval: float = 0.5):
        self.interval, self.peaks, self.names, self.total_mib = interval, {}, {}, 0.0
        self._stop = threading.Event()

    def _poll(self) -> None:
        q = ["nvidia-smi", "--format=csv,noheader,nounits"]
        while not self._stop.is_set():
            try:
                apps = subprocess.run(q + ["--query-compute-apps=pid,used_memory"],
                                      capture_output=True, text=True, timeout=10).stdout
                used = subprocess.run(q + ["--query-gpu=memory.used"], capture_output=True,
                                      text=True, timeout=10).stdout
            except (OSError, subprocess.SubprocessError):
                return
            for line in apps.splitlines():
                pid, _, mib = line.partition(",")
                if pid.strip().isdigit() and mib.strip().isdigit():
                    pid = int(pid)
                    self.peaks[pid] = max(self.peaks.get(pid, 0.0), float(mib))
                    self.names.setdefault(pid, _cmdline(pid))
            for line in used.splitlines()[:1]:
                if line.strip().isdigit():
                    self.total_mib = max(self.total_mib, float(line))
            self._stop.wait(self.interval)

    def __enter__(self):
        if shutil.which("nvidia-smi"):
            self._thread = threading.Thread(target=self._poll, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        if hasattr(self, "_thread"):
            self._thread.join(timeout=15)


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()[:80].strip()
    except OSError:
        return "?"




def read_sync_log(directory: Path) -> tuple[list, dict]:
    """(the trainer's records, {rollout pid: its records}) of one run's controller log directory,
    each list in logging order."""
    from soft_spatial.infra.jsonl import read_jsonl
    trainers, rollout = [], {}
    for path in sorted(Path(directory).glob("*.jsonl")):
        rows = read_jsonl(path)
        if path.name.startswith("trainer-"):
            trainers.append(rows)
        elif path.name.startswith("rollout-"):
            rollout[int(path.stem.split("-", 1)[1])] = rows

    def seq(rows):
        return [(r.get("step"), r["sha256"]) for r in rows]
    # every training rank sends the same controller: one sequence, or all of them (a mismatch)
    same = all(seq(t) == seq(trainers[0]) for t in trainers)
    return (trainers[0] if trainers and same else [r for t in trainers for r in t]), rollout


def check_sync(runs: list, want_steps: list, checkpoints: dict) -> tuple[list, list]:
    """Compare what the trainer sent with what the rollout server installed.

    ``runs``: per run, (trainer records, {rollout pid: records}); ``want_steps``: per run, the
    global steps of its syncs (verl syncs once at start, then after every step); ``checkpoints``:
    {step: fingerprint of that checkpoint's controller}. Returns (table rows, problems): one row
    per sync with the step, both fingerprints' first 12 hex digits and the verdict."""
    rows, problems, sent = [], [], {}
    for i, ((trainer, rollout), steps) in enumerate(zip(runs, want_steps), 1):
        got = [r.get("step") for r in trainer]
        if got != steps:
            problems.append(f"run {i}: the trainer logged syncs at steps {got}, expected {steps}")
        if not rollout:
            problems.append(f"run {i}: the rollout server logged no controller install")
        for pid, recs in sorted(rollout.items()):
            if len(recs) != len(trainer):
                problems.append(f"run {i}: rollout process {pid} installed {len(recs)} "
                                f"controllers, the trainer sent {len(trainer)}")
        for j, t in enumerate(trainer):
            installed = [recs[j]["sha256"] for recs in rollout.values() if j < len(recs)]
            same = bool(installed) and all(fp == t["sha256"] for fp in installed)
            ckpt = checkpoints.get(t.get("step"))
            rows.append([i, t.get("step"), t["sha256"][:12],
                         ", ".join(fp[:12] for fp in installed) or "–",
                         "yes" if same else "NO",
                         "–" if ckpt is None else ("yes" if ckpt == t["sha256"] else "NO")])
            if not same:
                problems.append(f"run {i}, sync at step {t.get('step')}: the rollout server "
                                f"installed {installed or 'nothing'}, the trainer sent {t['sha256']}")
            if ckpt is not None and ckpt != t["sha256"]:
                problems.append(f"run {i}, sync at step {t.get('step')}: the trainer sent "
                                f"{t['sha256']}, the step's checkpoint holds {ckpt}")
            if t.get("step") in sent and sent[t.get("step")] != t["sha256"]:
                problems.append(f"run {i}: the controller of step {t.get('step')} differs from "
                                f"the one an earlier run sent after that step (resume)")
            sent.setdefault(t.get("step"), t["sha256"])
    fps = [sent[s] for s in sorted(s for s in sent if s is not None)]
    if len(set(fps)) != len(fps):
        problems.append("the controller did not change between steps (fingerprints repeat)")
    return rows, problems


def checkpoint_fingerprint(ckpt: Path, step: int) -> str | None:
    """Fingerprint of the controller in ``global_step_<step>``'s ``adaptsoft.pt`` (None if absent)."""
    from soft_spatial.softthink import AdaptSoft
    from soft_spatial.softthink.controller import state_fingerprint
    found = sorted((Path(ckpt) / f"global_step_{step}").rglob("adaptsoft.pt"))
    return state_fingerprint(AdaptSoft.read_checkpoint(found[0]).weights) if found else None


def step_metrics(path: Path) -> dict:
    """{step: metrics} of a verl file-logger ``metrics.jsonl`` (the last line of a step wins)."""
    from soft_spatial.infra.jsonl import read_jsonl
    return {int(r["step"]): r["data"] for r in read_jsonl(path)} if Path(path).exists() else {}


def timing_rows(metrics: dict) -> list:
    """Rows (key, what, seconds per step...) of the time split: verl's named keys in step order,
    then any other ``timing_s/*`` key (but the agent loop's per-worker statistics and the
    profiler's markers), then the alignment time per micro-batch."""
    steps = sorted(metrics)
    keys = [k for k in TIMING if any(k in metrics[s] for s in steps)]
    other = {k for s in steps for k in metrics[s] if k.startswith("timing_s/")  # not the agent
             and not k.startswith("timing_s/agent_loop/") and not k.endswith("_profile")}  # loop's
    keys += sorted(other - set(keys))  # per-worker statistics, not the profiler's markers
    keys += [ALIGNMENT] if any(ALIGNMENT in metrics[s] for s in steps) else []
    what = {**TIMING, ALIGNMENT: "alignment, per micro-batch (mean)"}
    return [[k, what.get(k, ""), *(_num(metrics[s].get(k)) for s in steps)] for k in keys]


def _num(x):
    return "–" if x is None else float(f"{float(x):.4g}")



def run_training(cmd: list, log: Path, env: dict, timeout: float) -> int:
    """Run ``cmd`` tethered to this process (:mod:`soft_spatial.infra.tether`: it, Ray's daemons
    and SGLang's schedulers end with this process however it ends) with stdout and stderr in
    ``log``; on a timeout everything it started is ended. Returns the exit status (124: timed
    out)."""
    from soft_spatial.infra import tether
    with open(log, "w") as f:
        child = tether.start(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
        try:
            return child.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return 124
        finally:
            tether.stop(child)


def _requirements(dry: bool) -> None:
    try:
        import ray  # noqa: F401
        import sglang  # noqa: F401
        import verl  # noqa: F401
    except ImportError as e:
        raise Skip(f"E needs verl's stack and sglang (the kit's packs) ({e})") from e
    if not dry and os.environ.get("SGLANG_USE_CPU_ENGINE") == "1":
        raise Skip("SGLANG_USE_CPU_ENGINE=1 outside a dry run")
    if dry and os.environ.get("SGLANG_USE_CPU_ENGINE") != "1":
        raise Skip("on the CPU SGLang's engine needs SGLANG_USE_CPU_ENGINE=1 and "
                   "tests/sglang_stubs on PYTHONPATH (as scripts/test.sh runs tests/sglang_real)")


def model_shape(spec: ESpec, dry: bool) -> dict:
    """``build_tiny_model``'s arguments: the published 2B text shape with its rope (mrope
    [24, 20, 20]), untied, 4 language and 4 vision layers; with ``parity`` weights F's and D's
    init. A dry run: the tiny model (its init, or the parity init at its width)."""
    from soft_spatial.models.shapes import QWEN3_VL_2B, QWEN3_VL_2B_VISION, parity_init
    if dry:
        init = parity_init(64) if spec.weights == "parity" else {}
        return dict(vocab="small", **init, **({"tie_word_embeddings": False} if init else {}))
    text = {k: v for k, v in QWEN3_VL_2B.items() if k not in ("vision_config", "tie_word_embeddings")}
    text.update(num_hidden_layers=4)
    vision = dict(QWEN3_VL_2B_VISION, depth=4, deepstack_visual_indexes=[1, 2, 3])
    init = parity_init(QWEN3_VL_2B["hidden_size"]) if spec.weights == "parity" else {}
    return dict(vocab="qwen", **text, vision_config=vision, tie_word_embeddings=False, **init)


def _prepare(spec: ESpec, work: Path, dry: bool) -> tuple[Path, tuple[float, float]]:
    """The model and the parquet files of one E job, built where it runs: (the model, (its
    seconds, its millions of parameters))."""
    from transformers import AutoConfig

    from soft_spatial.data.fixtures import write_fixtures
    from soft_spatial.data.prepare import main as prepare
    from soft_spatial.models import build_tiny_model
    from soft_spatial.models.shapes import check_config
    shutil.rmtree(work, ignore_errors=True)
    t0 = time.perf_counter()
    model = build_tiny_model(work / "model", family="qwen3_vl", device="cpu" if dry else "cuda",
                             **model_shape(spec, dry))
    check_config(AutoConfig.from_pretrained(model), "E's model")
    fx = write_fixtures(work / "fixtures")
    for split in ("train", "test"):
        prepare(["--benchmark", "omnispatial", "--root", str(fx.omnispatial), "--split", split,
                 "--out", str(work / "data" / f"{split}.parquet"), "--processor", str(model)])
    n_params = sum(f.stat().st_size for f in model.glob("*.safetensors")) / 4  # fp32 on disk
    return model, (round(time.perf_counter() - t0, 1), round(n_params / 1e6, 1))


def _env(spec: ESpec, out: Path, metrics: Path) -> dict:
    """The training command's environment: verl's file logger, the alignment clock, and for
    SGLang's schedulers (in Ray's actors) the engine's environment, the graph log."""
    from soft_spatial.actor.train_engine import ALIGNMENT_CLOCK_ENV
    from soft_spatial.compat.sglang import GRAPH_LOG_ENV
    from soft_spatial.softthink.controller import FINGERPRINT_LOG_ENV
    env = dict(os.environ, HF_HUB_OFFLINE="1", RAY_USAGE_STATS_ENABLED="0",
               VERL_FILE_LOGGER_PATH=str(metrics),
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    env[ALIGNMENT_CLOCK_ENV] = "1"  # report actor/adaptsoft/alignment_s (off by default: it syncs)
    engine = engine_env(parity=spec.dtype == "float32", native_ops=True)
    env.update(engine, **{GRAPH_LOG_ENV: str(out / "graph-log")})
    extra = env.get("SOFT_SPATIAL_FORWARD_ENV", "")  # soft_spatial.infra.ray_env: every Ray process
    env["SOFT_SPATIAL_FORWARD_ENV"] = " ".join(filter(None, [
        extra, FINGERPRINT_LOG_ENV, ALIGNMENT_CLOCK_ENV, GRAPH_LOG_ENV, *engine]))
    return env


def run(spec: ESpec, *, out: Path, work: Path, dry: bool, deadline_at: float) -> EResult:
    """Train through verl with SGLang rollouts: the runs of ``spec`` in one run directory, each
    ending by ``deadline_at`` (epoch s) at the latest; logs, ``metrics.jsonl`` and controller
    logs in ``out``. Raises :class:`JobFailed` with what it measured on a failed run or check,
    :class:`Skip` without verl or SGLang."""
    from soft_spatial.softthink.controller import FINGERPRINT_LOG_ENV
    if spec.stock:
        raise Skip(f"verl's stock hard GRPO: {STOCK_BLOCKED}")
    _requirements(dry)
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    model, (build_s, params_m) = _prepare(spec, work, dry)
    metrics_path = out / "metrics.jsonl"
    env = _env(spec, out, metrics_path)
    r = EResult(spec, dry, build_s, params_m)
    syncs, checkpoints = [], {}
    for i, (steps, save, _) in enumerate(spec.runs(), 1):
        cmd = train_command(spec, model, work / "data", work / "ckpt", steps, save, dry)
        r.commands.append(" ".join(cmd[1:]).replace(str(work), "<work>"))
        env[FINGERPRINT_LOG_ENV] = str(out / f"controller-run{i}")
        _train_once(i, cmd, out / f"train-run{i}.log", env, deadline_at, r, metrics_path)
        syncs.append(read_sync_log(out / f"controller-run{i}"))
        if save and spec.adaptsoft:
            checkpoints[steps] = checkpoint_fingerprint(work / "ckpt", steps)
    return _assess(spec, r, step_metrics(metrics_path), syncs, checkpoints, out, model, dry,
                   deadline_at)


def _train_once(i, cmd, log: Path, env, deadline_at, r: EResult, metrics_path) -> None:
    timeout = deadline_at - time.time()
    if timeout < 30:
        raise JobFailed(f"run {i} not started: {timeout:.0f} s left before the deadline", r)
    print(f"E: run {i}, log {log}, timeout {timeout:.0f} s", flush=True)
    t1 = time.perf_counter()
    with GpuMemorySampler() as mem:
        rc = run_training(cmd, log, env, timeout)
    wall = time.perf_counter() - t1
    r.runs.append({"run": i, "rc": rc, "wall_s": round(wall, 1)})
    r.memory += [[i, pid, mem.names.get(pid, "?"), round(mib)]
                 for pid, mib in sorted(mem.peaks.items())]
    if mem.total_mib:
        r.memory.append([i, "all", "device total (nvidia-smi memory.used)", round(mem.total_mib)])
    if rc != 0:
        r.log_tail = log.read_text(errors="replace")[-4000:] if log.exists() else ""
        r.steps = sorted(step_metrics(metrics_path))
        raise JobFailed(f"run {i} exited with {rc}{' (timed out)' if rc == 124 else ''} after "
                        f"{wall:.0f} s", r)


def _problems(spec: ESpec, metrics: dict, dry: bool) -> list[str]:
    want = sorted({s for r in spec.runs() for s in r[2] if s})
    out = [] if sorted(metrics) == want else [f"metrics.jsonl holds steps {sorted(metrics)}, "
                                              f"expected {want}"]
    for s, m in sorted(metrics.items()):
        if not m.get("actor/grad_norm", 0) > 0:
            out.append(f"step {s}: the policy got no gradient (actor/grad_norm)")
        if dry and not abs(m.get(ROLLOUT_KL, float("inf"))) < 1e-4:
            out.append(f"step {s}: {ROLLOUT_KL} {m.get(ROLLOUT_KL)} (fp32: expected < 1e-4)")
        if not spec.adaptsoft:
            continue
        if not m.get("soft/soft_step_fraction", 0) > 0:
            out.append(f"step {s}: no soft steps (soft/soft_step_fraction)")
        if m.get("actor/adaptsoft/optimizer_steps") != s:  # a resume restored its optimizer
            out.append(f"step {s}: actor/adaptsoft/optimizer_steps "
                       f"{m.get('actor/adaptsoft/optimizer_steps')}")
        if m.get("actor/adaptsoft/grad_finite") != 1.0:
            out.append(f"step {s}: non-finite controller gradient")
    return out


def verdict(spec: ESpec, metrics: dict, dry: bool) -> dict:
    """The rollout/replay consistency per split and step, and the verdict: in fp32 (and every dry
    run) each recorded split ≤ :data:`FP32_BOUND`; a split not recorded is named as such, and
    without the soft split there is no fp32 verdict. bf16 has no bound here: the numbers, and
    whether the run's own replay check exceeded its (dtype-aware) bound."""
    splits = {k: {s: metrics[s].get(k) for s in sorted(metrics)} for k in REPLAY}
    recorded = {k: v for k, v in splits.items() if any(x is not None for x in v.values())}
    out = {"splits": splits, "not_recorded": [k for k in REPLAY if k not in recorded],
           "exceeded": {s: metrics[s].get(EXCEEDED) for s in sorted(metrics)},
           "rollout_kl": {s: metrics[s].get(ROLLOUT_KL) for s in sorted(metrics)}}
    if spec.dtype != "float32" and not dry:
        return dict(out, status="recorded (bf16: no bound here)", first_beyond=None)
    beyond = [(k, s, x) for k, v in recorded.items() for s, x in v.items()
              if x is not None and not x <= FP32_BOUND]
    if beyond:
        status = "fail"
    elif spec.adaptsoft and "soft/replay_max_abs_diff_soft" not in recorded:
        status = "undecided: soft/replay_max_abs_diff_soft not recorded"
    else:
        status = "pass"
    return dict(out, status=status, first_beyond=min(beyond, key=lambda b: b[1]) if beyond
                else None)


def _assess(spec, r: EResult, metrics, syncs, checkpoints, out, model, dry,
            deadline_at) -> EResult:
    problems = _problems(spec, metrics, dry)
    if spec.adaptsoft:
        r.sync_rows, sync_problems = check_sync(syncs, [x[2] for x in spec.runs()], checkpoints)
        r.sync_equal = not sync_problems
        problems += sync_problems
    from soft_spatial.compat.sglang import read_graph_log
    r.steps, r.timing_rows = sorted(metrics), timing_rows(metrics)
    r.timing = {s: {k: metrics[s].get(k) for k in (*TIMING, ALIGNMENT) if k in metrics[s]}
                for s in metrics}
    r.memory_keys = [[k, *(_num(metrics[s].get(k)) for s in sorted(metrics))] for k in MEMORY]
    r.graph_batches = read_graph_log(str(out / "graph-log"))
    r.verdict, r.problems = verdict(spec, metrics, dry), problems
    if spec.adaptsoft and (r.verdict["status"] == "fail" or (dry and spec.diagnose_dry)):
        r.diagnosis = _diagnose(spec, model, out, dry, deadline_at)
    if problems or r.verdict["status"] == "fail":
        raise JobFailed("; ".join(problems) or f"replay consistency beyond {FP32_BOUND} nats", r)
    return r


def _diagnose(spec, model, out, dry, deadline_at) -> dict:
    """The soft inputs compared tensor by tensor (:mod:`.replay_inputs`), if time is left."""
    from soft_spatial_bench.gpu import replay_inputs
    if deadline_at - time.time() < replay_inputs.NEEDS_S:
        return {"skipped": f"{deadline_at - time.time():.0f} s left, it needs "
                           f"{replay_inputs.NEEDS_S:.0f} s"}
    try:
        return replay_inputs.diagnose(model, spec.dtype, dry, out / "replay-inputs", FP32_BOUND)
    except Exception as e:  # the diagnosis must not hide the verdict it explains
        import traceback
        return {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()[-3000:]}


def measure(ctx, job) -> EResult:
    """One E job of the plan (its runs, its verdict), in ``work/e-<name>``; what comes back in
    ``work/e-<name>-out`` (tarred into ``stage-e.tar.gz``)."""
    spec = ESpec.from_args(job.args)
    return run(spec, out=ctx.work / f"e-{job.name}-out", work=ctx.work / f"e-{job.name}",
               dry=ctx.dry_run, deadline_at=ctx.deadline_at - 5)


def _fmt(x) -> str:
    return "not recorded" if x is None else f"{x:.3g}"


def render(v: EResult) -> list[str]:
    spec = v.spec
    where = ("the CPU (dry run: tiny Qwen3-VL, fp32, cluster=cpu)" if v.dry else
             f"one GPU (Qwen3-VL-2B widths, 4 + 4 layers, {spec.dtype}, cluster=gpu1)")
    lines = [f"`python -m soft_spatial.train rollout=sglang experiment={spec.experiment}`"
             f"{' (stock verl: its SGLang rollout, actor and loss)' if spec.stock else ''} "
             f"on {where}; {spec.weights} weights, {v.params_m} M parameters "
             f"written in {v.build_s} s; runs "
             + ", ".join(f"{r['run']}: rc {r['rc']}, {r['wall_s']:.0f} s" for r in v.runs)
             + ". Logs, metrics.jsonl and the controller logs: `stage-e.tar.gz`.", ""]
    lines += [f"- run {i}: `{c}`" for i, c in enumerate(v.commands, 1)] + [""]
    if v.log_tail:
        lines += ["```", v.log_tail.rstrip(), "```", ""]
    lines += _verdict_lines(v.verdict, v.graph_batches)
    if v.timing_rows:
        lines += ["Time split per step (s; verl's `timing_s/*`):", "",
                  *table(["key", "what", *(f"step {s}" for s in v.steps)], v.timing_rows), ""]
    if v.memory_keys:
        lines += ["Memory of the training worker (verl's `actor/perf/*`, GiB):", "",
                  *table(["key", *(f"step {s}" for s in v.steps)], v.memory_keys), ""]
    if v.memory:
        lines += ["Peak device memory per process (nvidia-smi, sampled every 0.5 s, MiB):", "",
                  *table(["run", "pid", "process", "peak MiB"], v.memory), ""]
    if v.sync_rows:
        lines += ["Controller at every weight sync: the trainer's fingerprint, the SGLang "
                  "plugin's, the checkpoint's:", "",
                  *table(["run", "sync after step", "trainer", "rollout server", "equal",
                          "= checkpoint"], v.sync_rows), ""]
    if v.diagnosis:
        from soft_spatial_bench.gpu.replay_inputs import render as render_diagnosis
        lines += render_diagnosis(v.diagnosis)
    if v.problems:
        lines += ["Problems:", *(f"- {p}" for p in v.problems)]
    return lines


def _verdict_lines(vd: dict | None, graphs: dict | None) -> list[str]:
    if not vd:
        return []
    steps = sorted({s for v in vd["splits"].values() for s in v}, key=int)
    g = graphs or {}
    out = [f"**Verdict: {vd['status']}**"
           + (f" (bound {FP32_BOUND} nats on every recorded split)" if vd["status"] in
              ("pass", "fail") else "")
           + (f"; first beyond: {vd['first_beyond'][0]} = {vd['first_beyond'][2]:.3g} at step "
              f"{vd['first_beyond'][1]}" if vd.get("first_beyond") else "")
           + f". SGLang's decode batches: {g.get('replayed', '–')} replayed a graph, "
             f"{g.get('eager', '–')} eager.", "",
           "Rollout/replay consistency (max \\|SGLang's per-step likelihood − the trainer's "
           "recomputation\\|, nats):", ""]
    rows = [[k, what, *(_fmt(vd["splits"][k].get(s)) for s in steps)] for k, what in REPLAY.items()]
    rows.append([ROLLOUT_KL, "verl's KL estimate", *(_fmt(vd["rollout_kl"].get(s)) for s in steps)])
    rows.append([EXCEEDED, "the run's own check", *(_fmt(vd["exceeded"].get(s)) for s in steps)])
    return out + table(["key", "steps", *(f"step {s}" for s in steps)], rows) + [""]


def e_summary_rows(latest: dict[str, dict]) -> list[list]:
    """One row per E job of the plan's records, for the report's headline."""
    rows = []
    for key, r in latest.items():
        v = r.get("values", {})
        if not key.startswith("E/") or "spec" not in v:
            if key.startswith("E/") and r["status"] not in ("started",):
                rows.append([key, r["status"], *["–"] * 8])
            continue
        vd = v.get("verdict") or {"splits": {}, "status": "–"}

        def worst(k):
            xs = [x for x in vd["splits"].get(k, {}).values() if x is not None]
            return _fmt(max(xs)) if xs else "not recorded"
        g = v.get("graph_batches") or {}
        rows.append([key, r["status"], v["spec"]["dtype"], v["spec"]["weights"],
                     f"{g.get('replayed', '–')} replayed / {g.get('eager', '–')} eager",
                     vd["status"], *(worst(k) for k in REPLAY)])
    return rows


def step_price_rows(latest: dict[str, dict]) -> list[list]:
    """adaptsoft (``E/bf16``) against stock hard (``E/hard``), per timing key and step."""
    soft = latest.get("E/bf16", {}).get("values", {}).get("timing")
    hard = latest.get("E/hard", {}).get("values", {}).get("timing")
    if not soft or not hard:
        return []
    rows = []
    for step in sorted(set(soft) & set(hard), key=int):
        for k, what in {**TIMING, ALIGNMENT: "alignment, per micro-batch"}.items():
            a, b = soft[step].get(k), hard[step].get(k)
            if a is not None or b is not None:
                rows.append([f"{k} (step {step})", what, _fmt(a), _fmt(b),
                             round(a / b, 3) if a and b else "–"])
    return rows
