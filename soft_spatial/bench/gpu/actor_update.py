"""C/actor-update: one actor update through verl's FSDP2 engine on one GPU (a Qwen3-VL-2B-shaped
language model): hard vs soft_fixed vs adaptsoft time and peak memory, each mode in its own process
on a device, so that each peak is its own (``python -m soft_spatial.bench.gpu.actor_update
MODE[,MODE...] MODEL BATCH [--dry-run]`` prints their JSON; a dry run's modes share one process:
two fewer start-ups of verl on a CPU, where no memory is measured). Each child is tethered to the
job's process (``infra/tether.py``): it ends with the plan, however the plan ends."""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

from soft_spatial.bench.workloads import random_controller
from soft_spatial.infra import tether
from soft_spatial.bench.gpu import parity
from soft_spatial.bench.gpu.context import KitContext, free_memory
from soft_spatial.bench.gpu.measure import PeakMemory, random_model, sync
from soft_spatial.bench.gpu.report import JobFailed, Skip, table
from soft_spatial.models.shapes import QWEN3_VL_2B_TEXT

__all__ = ["ActorResult", "measure", "render", "prepare", "child_c", "child_command",
           "process_groups", "MODES"]

#: the modes C times, hard first (the ratios' denominator)
MODES = ("hard", "soft_fixed", "adaptsoft")


@dataclass
class ActorResult:
    """C/actor-update's result: the batch (rows × response tokens), per mode its update's timing
    and memory (``modes``) or the end of its child's stderr (``errors``)."""

    params_b: float
    rows: int
    steps: int
    dry: bool
    modes: dict = field(default_factory=dict)
    errors: dict = field(default_factory=dict)


def measure(ctx: KitContext, job) -> ActorResult:
    model_dir, batch, n_params, rows, steps = prepare(ctx)
    r = ActorResult(round(n_params / 1e9, 3), rows, steps, ctx.dry_run)
    for group in process_groups(ctx.dry_run):
        res = tether.run(child_command(group, model_dir, batch, ctx.dry_run),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if res.returncode != 0:
            r.errors.update(dict.fromkeys(group, res.stderr[-4000:]))
            continue
        r.modes.update(json.loads(res.stdout.strip().splitlines()[-1]))
    if r.errors:
        raise JobFailed(f"the update of {', '.join(r.errors)} failed", r)
    return r


def render(r: ActorResult) -> list[str]:
    h = r.modes.get("hard") or next(iter(r.modes.values()), None)
    rows = [[m, round(x["time_s"], 3), round(x["min_s"], 3), round(x["time_s"] / h["time_s"], 2),
             round(x["peak_mib"], 0), round(x["peak_mib"] / max(h["peak_mib"], 1e-3), 2),
             round(x["max_allocated_mib"], 0)] for m, x in r.modes.items()]
    lines = [f"Model: Qwen3-VL-2B language-model shape (text-only Qwen3, random weights, "
             f"{r.params_b:.2f} B parameters); verl FSDP2 engine, fp32 master weights, "
             f"{'fp32' if r.dry else 'bf16'} compute, gradient checkpointing "
             f"{'off' if r.dry else 'on'}; one micro-batch update of {r.rows} sequences × "
             f"{r.steps} response tokens (adaptsoft rollouts; `hard` re-scores their spines as a "
             f"discrete chain), median of {h['repeats'] if h else '–'} updates after a warm-up, "
             f"each mode in a fresh process{' (a dry run: one process)' if r.dry else ''}. "
             f"`hard` is verl's stock engine (model type language_model); update peak is the "
             f"memory an update allocates above the weights and optimizer state.", "",
             *table(["mode", "update s (median)", "min s", "× hard", "update peak MiB", "× hard",
                     "max allocated MiB"], rows)]
    return lines + [x for m, e in r.errors.items() for x in ("", f"{m} failed:", "```", e, "```")]


def prepare(ctx: KitContext) -> tuple:
    """The model and batch, saved in the scratch directory for the children: (model directory,
    batch file, parameters, rows, response tokens)."""
    import torch

    try:
        import ray  # noqa: F401
        import tensordict  # noqa: F401
        import verl  # noqa: F401
    except ImportError as e:
        raise Skip(f"verl's stack is not installed ({e}); stage its pack with kit.py") from e
    from soft_spatial.engines import LocalEngine
    from soft_spatial.models.tiny import build_tokenizer, tiny_config
    from soft_spatial.models.shapes import check_config
    from soft_spatial.softthink import SamplingConfig, SoftThinkingConfig

    dev = ctx.device
    rows, n, steps = (4, 2, 8) if ctx.dry_run else (8, 2, 1024)
    model_dir = ctx.work / "actor_model"
    tok = build_tokenizer("qwen")
    config = check_config(tiny_config("qwen3", tok, **({} if ctx.dry_run else QWEN3_VL_2B_TEXT)),
                          "C/actor-update's model")
    model = random_model(config, dev, ctx.dtype)
    model.save_pretrained(model_dir)
    tok.save_pretrained(model_dir)
    n_params = sum(p.numel() for p in model.parameters())
    eng = LocalEngine(model, tok, max_batch_rows=rows * n)
    eng.eos_ids = []
    ctrl = random_controller(eng.hidden_size)
    eng.set_controller(ctrl.to_state())
    prompts = [[5 + i, 9, 13, 40 + i, 41, 42, 7, 8] for i in range(rows // n)]
    outs = eng.generate(prompts, soft_thinking=SoftThinkingConfig(mode="adaptsoft"), n=n,
                        sampling=SamplingConfig(max_new_tokens=steps))
    batch = ctx.work / "actor_batch.pt"
    torch.save({"prompts": [prompts[o.prompt_index] for o in outs],
                "outs": parity.dump_completions(outs),
                "controller": ctrl.to_state().to_blob()},
               batch)
    del eng, model
    free_memory()
    return model_dir, batch, n_params, rows, steps


def child_command(group: tuple[str, ...], model_dir, batch, dry_run: bool) -> list[str]:
    """The child process that times ``group``'s modes on the model and batch :func:`prepare` saved."""
    return ([sys.executable, "-m", "soft_spatial.bench.gpu.actor_update", ",".join(group),
             str(model_dir), str(batch)] + ["--dry-run"] * dry_run)


def process_groups(dry_run: bool) -> list[tuple[str, ...]]:
    """The modes each child process times: one each on a device (each peak its own), all in one
    on a dry run."""
    return [MODES] if dry_run else [(m,) for m in MODES]


def child_c(modes: list[str], model_dir: str, batch_path: str, dry_run: bool) -> dict:
    """The update timing of each of ``modes`` in this process ({mode: values}; one process group
    for all of them)."""
    import torch
    cpu = dry_run or not torch.cuda.is_available()
    os.environ.setdefault("VERL_PLATFORM", "cpu" if cpu else "nvidia")
    from soft_spatial.plugin import register
    register()  # soft_grpo, the soft engine, the CPU platform (VERL_PLATFORM is set above)
    from soft_spatial.integration.platform import init_process_group

    init_method = "file://" + tempfile.mktemp()
    if cpu:
        init_process_group(0, 1, init_method)
    else:
        import torch.distributed as dist
        torch.cuda.set_device(0)
        dist.init_process_group("nccl", init_method=init_method, rank=0, world_size=1)
    return {mode: _update_timing(mode, model_dir, batch_path, dry_run, cpu) for mode in modes}


def _update_timing(mode: str, model_dir: str, batch_path: str, dry_run: bool, cpu: bool) -> dict:
    """One mode's update: a warm-up, then the median of its repeats and the memory they took."""
    import copy
    from functools import partial

    import torch

    from soft_spatial.actor.adaptsoft_trainer import AdaptSoftTrainer
    from soft_spatial.actor.loss import soft_ppo_loss
    from soft_spatial.bench import workloads as H
    from soft_spatial.softthink import AdaptSoft, ControllerState, SoftTrace

    data = torch.load(batch_path, weights_only=True)
    prompts, outs = data["prompts"], parity.load_completions(data["outs"])
    if mode == "hard":
        for o in outs:  # the same tokens, as a discrete chain of thought
            o.trace = SoftTrace.discrete(o.token_ids, o.trace.k, o.trace.feature_dim)
    precision = "fp32" if cpu else "bf16"
    engine = H.make_train_engine(model_dir, model_type="language_model" if mode == "hard"
                           else "soft_language_model", cpu=cpu, param_dtype=precision,
                           gradient_checkpointing=not cpu)
    if mode == "adaptsoft":
        ctrl = AdaptSoft.from_state(ControllerState.from_blob(data["controller"], source=batch_path))
        engine.configure_soft(adaptsoft=AdaptSoftTrainer(copy.deepcopy(ctrl), seed=1,
                                                         device=0 if not cpu else "cpu"))
    dev = "cpu" if cpu else "cuda"
    td = H.train_batch_td(engine, prompts, outs, micro_batch_size=len(outs), device=dev)
    loss = partial(soft_ppo_loss, config=H.actor_config())
    repeats = 1 if dry_run else 5
    with engine.train_mode():  # warm-up: allocates the optimizer state, compiles, caches
        engine.train_batch(td, loss)
    times = []
    with PeakMemory(dev) as mem:  # transient memory of an update above weights + optimizer state
        for _ in range(repeats):
            sync(dev)
            t0 = time.perf_counter()
            with engine.train_mode():
                engine.train_batch(td, loss)
            sync(dev)
            times.append(time.perf_counter() - t0)
    peak = mem.mib if not cpu else float("nan")
    resident = torch.cuda.max_memory_allocated() / 2 ** 20 if not cpu else float("nan")
    return {"time_s": statistics.median(times), "min_s": min(times), "peak_mib": peak,
            "max_allocated_mib": resident, "repeats": repeats}


def main(argv=None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    dry = "--dry-run" in args
    arg, model_dir, batch = [a for a in args if a != "--dry-run"]
    modes = arg.split(",")
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        raise SystemExit(f"actor_update: unknown mode(s) {unknown}; the modes are {', '.join(MODES)}")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    print(json.dumps(child_c(modes, model_dir, batch, dry)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
