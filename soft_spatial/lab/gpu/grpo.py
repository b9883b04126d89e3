"""E — GRPO with AdaptSoft through verl's trainer on one
GPU, SGLang as the rollout, trainer and rollout colocated (verl's hybrid engine).

Two runs of ``python -m soft_spatial.train rollout=sglang experiment=adaptsoft`` in the same run
directory, each a subprocess with its own log: the first trains step 1 and saves its checkpoint,
the second resumes from it and trains step 2 (so the resume path, actor and AdaptSoft state alike,
runs too). On a GPU: a Qwen3-VL-2B-shaped model (check.py's shapes, random weights), FSDP2 and
SGLang in bf16 (configs/cluster/gpu1.yaml: SGLang's memory released during training, weights
synced over CUDA IPC). In a dry run: the tiny Qwen3-VL with the small vocabulary and
configs/cluster/cpu.yaml, SGLang's real engine on the CPU (as tests/sglang_real runs it), the same
code path. ``--quick`` keeps the 2B widths and vocabulary with 4 language and 4 vision layers.
Each run is limited to ``$SOFT_SPATIAL_STAGE_E_TIMEOUT`` seconds (default 900).

From the runs' ``metrics.jsonl`` and their controller logs the report gives, per step:

* the step time split, from verl's ``timing_s/*`` (``gen``: rollout; ``old_log_prob``; ``ref``;
  ``update_actor``; ``update_weights``: the weight sync, SGLang's memory resume included) and
  ``actor/adaptsoft/alignment_s`` (the controller's alignment, per micro-batch; the stage sets
  ``SOFT_SPATIAL_ALIGNMENT_CLOCK=1``);
* peak memory: verl's ``perf/max_memory_allocated_gb`` / ``perf/max_memory_reserved_gb`` (the
  training worker), and on a GPU the peak of ``nvidia-smi``'s per-process usage, sampled;
* ``soft/replay_max_abs_diff`` and ``soft/replay_max_abs_diff_soft`` (SGLang's per-step
  likelihoods against the trainer's recomputation);
* that the rollout server's controller equals the trainer's after every weight sync: the worker
  logs the fingerprint (``softthink.controller.state_fingerprint``) of the controller it sends, the
  SGLang plugin the fingerprint of the controller it installed, both through
  ``SOFT_SPATIAL_CONTROLLER_LOG``; they must agree sync by sync, the fingerprint after step 1 must
  be the step-1 checkpoint's controller, and the resumed run must send it again first.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from soft_spatial.lab.gpu.report import Skip, StageFailed, table
from soft_spatial.lab.gpu.sglang_args import engine_env

ROOT = Path(__file__).resolve().parents[3]
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
REPLAY = ("soft/replay_max_abs_diff", "soft/replay_max_abs_diff_soft")
# verl's own rollout/training comparison (mean log-prob difference as a KL estimate)
ROLLOUT_KL = "rollout_corr/kl"
MEMORY = ("actor/perf/max_memory_allocated_gb", "actor/perf/max_memory_reserved_gb",
          "actor/perf/cpu_memory_used_gb")
DRY_REPLAY_BOUND = 1e-3  # fp32 on the CPU: SGLang's likelihoods = the trainer's (tests/sglang_real)


def train_command(model: Path, data: Path, ckpt: Path, steps: int, save: bool, dry: bool) -> list:
    """``python -m soft_spatial.train`` for a run to ``steps`` in ``ckpt`` (a resume when a
    checkpoint is there), saving a checkpoint after every step if ``save``."""
    cluster = ["cluster=cpu", "trainer.n_gpus_per_node=1",  # the CPU settings of the suite's training tests
               "actor_rollout_ref.actor.optim.lr=1e-3",
               "actor_rollout_ref.actor.optim.lr_warmup_steps_ratio=0"] if dry else ["cluster=gpu1"]
    return [sys.executable, "-m", "soft_spatial.train", "model=tiny", "rollout=sglang",
            "experiment=adaptsoft", *cluster, f"model.path={model}",
            f"data.train_files={data / 'train.parquet'}", f"data.val_files={data / 'test.parquet'}",
            f"trainer.default_local_dir={ckpt}",
            f"reward.custom_reward_function.path={ROOT / 'tests' / 'support' / 'smoke_reward.py'}",
            f"trainer.total_training_steps={steps}", f"trainer.save_freq={1 if save else -1}"]


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


def run_training(cmd: list, log: Path, env: dict, timeout: float) -> int:
    """Run ``cmd`` in its own process group with stdout and stderr in ``log``; on a timeout the
    whole group is killed (Ray and SGLang included). Returns the exit status (124: timed out)."""
    with open(log, "w") as f:
        proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, cwd=ROOT,
                                start_new_session=True)
        try:
            return proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            return 124


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
    return state_fingerprint(AdaptSoft.read_checkpoint(found[0])["state_dict"]) if found else None


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


# (steps, save a checkpoint, the global steps of its weight syncs): verl syncs once at start,
# then after every step
ONE_RUN = [(2, False, [0, 1, 2])]                   # the headline: one run to step 2
RESUME = [(1, True, [0, 1]), (2, False, [1, 2])]    # step 1 and its checkpoint, then a resume


def run(*, out: Path, work: Path, dry: bool, quick: bool, deadline_at: float,
        plan=RESUME, graphs: bool = True) -> tuple[dict, list[str]]:
    """Train through verl with SGLang rollouts: the runs of ``plan`` in one run directory, each
    ending by ``deadline_at`` (epoch s) at the latest; logs, ``metrics.jsonl`` and controller logs
    in ``out``. ``graphs``: SGLang's CUDA graphs (off: ``rollout.enforce_eager``). Returns
    (values, report lines); raises :class:`StageFailed` with what it measured on a failed run
    or check, :class:`Skip` without verl or SGLang."""
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
    from soft_spatial.actor.train_engine import ALIGNMENT_CLOCK_ENV
    from soft_spatial.data.fixtures import write_fixtures
    from soft_spatial.data.prepare import main as prepare
    from soft_spatial.models import build_tiny_model
    from soft_spatial.models.shapes import QWEN3_VL_2B, QWEN3_VL_2B_VISION, check_config
    from soft_spatial.softthink.controller import FINGERPRINT_LOG_ENV

    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    shutil.rmtree(work, ignore_errors=True)
    t0 = time.perf_counter()
    # the published text shape with its rope (mrope [24, 20, 20]: the 2026-11-26 run's model
    # kept the tiny [4, 2, 2], which SGLang "corrected" and transformers did not), untied
    text = {k: v for k, v in QWEN3_VL_2B.items() if k not in ("vision_config", "tie_word_embeddings")}
    vision = dict(QWEN3_VL_2B_VISION)
    if quick:  # the 2B widths and vocabulary, 4 layers each: a third of the bytes to move
        text.update(num_hidden_layers=4)
        vision.update(depth=4, deepstack_visual_indexes=[1, 2, 3])
    shape = dict(vocab="small") if dry else dict(vocab="qwen", **text, vision_config=vision)
    model = build_tiny_model(work / "model", family="qwen3_vl",
                             device="cpu" if dry else "cuda", **shape)  # drawn where it runs
    build_s = time.perf_counter() - t0
    from transformers import AutoConfig
    check_config(AutoConfig.from_pretrained(model), "stage e's model")
    n_params = sum(f.stat().st_size for f in model.glob("*.safetensors")) / 4  # fp32 on disk
    fx = write_fixtures(work / "fixtures")
    for split in ("train", "test"):
        prepare(["--benchmark", "omnispatial", "--root", str(fx.omnispatial), "--split", split,
                 "--out", str(work / "data" / f"{split}.parquet"), "--processor", str(model)])
    ckpt, metrics_path = work / "ckpt", out / "metrics.jsonl"
    env = dict(os.environ, HF_HUB_OFFLINE="1", RAY_USAGE_STATS_ENABLED="0",
               VERL_FILE_LOGGER_PATH=str(metrics_path),
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    env[ALIGNMENT_CLOCK_ENV] = "1"  # report actor/adaptsoft/alignment_s (off by default: it syncs)
    engine = engine_env(parity=False, native_ops=True)  # SGLang's schedulers, in Ray's actors
    env.update(engine)
    extra = env.get("SOFT_SPATIAL_FORWARD_ENV", "")  # soft_spatial.infra.ray_env: to every Ray process
    env["SOFT_SPATIAL_FORWARD_ENV"] = " ".join(filter(None, [extra, FINGERPRINT_LOG_ENV,
                                                             ALIGNMENT_CLOCK_ENV, *engine]))
    runs, sampler_rows, commands, checkpoints = [], [], [], {}
    values = {"quick": quick, "graphs": graphs, "build_s": round(build_s, 1), "runs": [],
              "engine_env": engine}
    for i, (steps, save, _) in enumerate(plan, 1):
        cmd = train_command(model, work / "data", ckpt, steps, save, dry)
        if not graphs:
            cmd.append("actor_rollout_ref.rollout.enforce_eager=true")
        commands.append(" ".join(cmd[1:]).replace(str(work), "<work>"))
        env[FINGERPRINT_LOG_ENV] = str(out / f"controller-run{i}")
        log = out / f"train-run{i}.log"
        timeout = deadline_at - time.time()
        if timeout < 30:
            raise StageFailed([f"run {i} not started: {timeout:.0f} s left before the deadline"])
        print(f"E: run {i} (to step {steps}), log {log}, timeout {timeout:.0f} s", flush=True)
        t1 = time.perf_counter()
        with GpuMemorySampler() as mem:
            rc = run_training(cmd, log, env, timeout)
        wall = time.perf_counter() - t1
        values["runs"].append({"run": i, "rc": rc, "wall_s": round(wall, 1)})
        sampler_rows += [[i, pid, mem.names.get(pid, "?"), round(mib)]
                         for pid, mib in sorted(mem.peaks.items())]
        if mem.total_mib:
            sampler_rows.append([i, "all", "device total (nvidia-smi memory.used)",
                                 round(mem.total_mib)])
        if rc != 0:
            tail = log.read_text(errors="replace")[-4000:] if log.exists() else ""
            done = sorted(step_metrics(metrics_path))
            raise StageFailed([f"run {i} (`{commands[-1]}`) exited with {rc}"
                               f"{' (timed out)' if rc == 124 else ''} after {wall:.0f} s; steps "
                               f"logged: {done}; the end of {log.name}:", "", "```", tail, "```"])
        runs.append((read_sync_log(out / f"controller-run{i}"), wall))
        if save:
            checkpoints[steps] = checkpoint_fingerprint(ckpt, steps)
    metrics = step_metrics(metrics_path)
    want = sorted({s for p in plan for s in p[2] if s})
    problems = []
    if sorted(metrics) != want:
        problems.append(f"metrics.jsonl holds steps {sorted(metrics)}, expected {want}")
    for s, m in sorted(metrics.items()):
        if not m.get("soft/soft_step_fraction", 0) > 0:
            problems.append(f"step {s}: no soft steps (soft/soft_step_fraction)")
        if m.get("actor/adaptsoft/optimizer_steps") != s:  # the resume restored its optimizer
            problems.append(f"step {s}: actor/adaptsoft/optimizer_steps "
                            f"{m.get('actor/adaptsoft/optimizer_steps')}")
        if m.get("actor/adaptsoft/grad_finite") != 1.0:
            problems.append(f"step {s}: non-finite controller gradient")
        if not m.get("actor/grad_norm", 0) > 0:
            problems.append(f"step {s}: the policy got no gradient (actor/grad_norm)")
        if dry and not abs(m.get(ROLLOUT_KL, float("inf"))) < 1e-4:
            problems.append(f"step {s}: {ROLLOUT_KL} {m.get(ROLLOUT_KL)} (fp32: expected < 1e-4)")
        if dry and not max(m.get(k, float("inf")) for k in REPLAY) < DRY_REPLAY_BOUND:
            problems.append(f"step {s}: replay difference {[m.get(k) for k in REPLAY]} >= "
                            f"{DRY_REPLAY_BOUND} (fp32: SGLang's likelihoods must be the trainer's)")
    sync_rows, sync_problems = check_sync([r for r, _ in runs], [p[2] for p in plan], checkpoints)
    problems += sync_problems

    steps = sorted(metrics)
    where = "the CPU (dry run: tiny Qwen3-VL, small vocabulary, fp32, cluster=cpu)" if dry else \
        (f"one GPU (Qwen3-VL-2B widths, {text['num_hidden_layers']} language and "
         f"{vision['depth']} vision layers, random weights, bf16, cluster=gpu1, CUDA graphs "
         f"{'on' if graphs else 'off'})")
    lines = [f"`python -m soft_spatial.train rollout=sglang experiment=adaptsoft` on {where}; "
             f"{n_params / 1e6:,.1f} M parameters, written in {build_s:.0f} s. "
             + ("Run 1 trains step 1 and saves it, run 2 resumes and trains step 2"
                if len(plan) > 1 else "One run trains steps 1 and 2")
             + f" (wall {', '.join(f'{w:.0f} s' for _, w in runs)}, Ray, SGLang and the "
             f"workers' start included). Logs, metrics.jsonl and the controller logs: "
             f"`stage-e/`.", ""]
    lines += [f"- run {i}: `{c}`" for i, c in enumerate(commands, 1)] + [""]
    lines += ["Time split per step (s; verl's `timing_s/*` keys, step 2 is the resumed run's "
              "first step):", ""]
    lines += table(["key", "what", *(f"step {s}" for s in steps)], timing_rows(metrics))
    lines += ["", "Memory of the training worker process (verl's `actor/perf/*`, GiB; torch's "
              "allocator peaks since the process started):", ""]
    lines += table(["key", *(f"step {s}" for s in steps)],
                       [[k, *(_num(metrics[s].get(k)) for s in steps)] for k in MEMORY])
    if sampler_rows:
        lines += ["", "Peak device memory per process (nvidia-smi, sampled every 0.5 s, MiB):", ""]
        lines += table(["run", "pid", "process", "peak MiB"], sampler_rows)
    elif not dry:
        lines += ["", "nvidia-smi showed no per-process memory (missing, or a PID namespace)."]
    lines += ["", "Rollout/replay consistency (max |SGLang's per-step likelihood − the trainer's "
              "recomputation| over response steps; `_soft`: soft steps only)"
              + (f", bound {DRY_REPLAY_BOUND} in fp32:" if dry else ", bf16 rollout and replay:"), ""]
    lines += table(["key", *(f"step {s}" for s in steps)],
                       [[k, *(_num(metrics[s].get(k)) for s in steps)]
                        for k in (*REPLAY, ROLLOUT_KL)])
    lines += ["", "Controller at every weight sync: fingerprint (sha256 of the state dict) the "
              "trainer sent, the one the SGLang plugin installed, and the step's checkpoint:", ""]
    lines += table(["run", "sync after step", "trainer", "rollout server", "equal",
                        "= checkpoint"], sync_rows)
    values.update(steps=steps, problems=problems, sync_equal=not sync_problems,
                  timing={s: {k: metrics[s].get(k) for k in TIMING if k in metrics[s]}
                          for s in steps})
    if problems:
        raise StageFailed(lines + ["", "Problems:", *(f"- {p}" for p in problems)])
    return values, lines
