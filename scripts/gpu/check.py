"""Validate and measure the GPU path in one command, writing a Markdown report.

    python3 scripts/gpu/check.py                       # every stage, on the GPU
    python3 scripts/gpu/check.py --stages a,b --out report.md
    python scripts/gpu/check.py --dry-run              # each stage's logic on the CPU, tiny sizes

Stages (each independent; a stage whose packages are missing is skipped with the reason):
  a  the embedded engine (LocalEngine) on CUDA with a random Qwen3-VL-8B-Thinking-shaped model
     (built from its config, bf16, no download): soft decoding with noise 0 and τ→0 equals greedy
     decoding; hard vs fixed vs adaptsoft decode throughput at 8 prompts × G=8 with images.
  b  softthink at real sizes (V=151,936, D=4,096, N up to 32k): exact gradient alignment's time
     and peak memory against the naive per-step V×D form, Gumbel-density and replay throughput.
  c  one actor update through verl's FSDP2 engine on one GPU (a Qwen3-VL-2B-shaped language
     model): hard vs soft_fixed vs adaptsoft time and peak memory, each mode in its own process.
  d  SGLang 0.5.12 with the soft plugin (the kit's sglang pack): tokens, records and likelihoods
     against the embedded engine's fp32 and fp64 runs on the same weights and seeds (fp32, every
     mode, TF32 off), the first divergence and per-step |Δ|, then SGLang vs embedded throughput.
  e  GRPO through verl with SGLang rollouts on one GPU (scripts/gpu/stage_e.py): 2 steps with a
     checkpoint and a resume; time split, peak memory, replay consistency, controller sync.
  f  soft decoding under SGLang's CUDA graphs (scripts/gpu/stage_f.py): graphs on/off throughput
     against stock SGLang hard decoding, graphs-on/off parity in fp32.

The report is rewritten after every stage, so a run cut short keeps what finished. Timings
synchronise the device and take the median of repeats after a warm-up.
"""
from __future__ import annotations

import argparse
import datetime
import gc
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
for p in (ROOT, ROOT / "scripts", ROOT / "tests"):  # our package, bench_* and test helpers
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from soft_spatial.models.shapes import QWEN3_VL_2B, QWEN3_VL_2B_TEXT, QWEN3_VL_8B, parity_init  # noqa: E402,F401

MODES = ("hard", "fixed", "adaptsoft")


from soft_spatial.lab.gpu.report import Skip, StageFailed  # noqa: E402


@dataclass
class Ctx:
    dry_run: bool
    quick: bool
    device: str
    report: "Report"
    workdir: Path
    notes: list = field(default_factory=list)
    drift: bool = False  # stage d: also the embedded engine's fp32 − fp64 self-drift

    @property
    def dtype(self):
        import torch
        return torch.float32 if self.dry_run else torch.bfloat16


class Report:
    """Markdown report, rewritten after every stage."""

    def __init__(self, path: Path, header: list[str]):
        self.path, self.header, self.sections = path, header, []

    def add(self, title: str, status: str, lines: list[str], seconds: float) -> None:
        self.sections.append([f"## {title}", "", f"**{status}** ({seconds:.0f} s)", ""] + lines + [""])
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text("\n".join(self.header + [x for s in self.sections for x in s]) + "\n")
        tmp.replace(self.path)


def table(head: list[str], rows: list[list]) -> list[str]:
    def fmt(x):
        return f"{x:.4g}" if isinstance(x, float) else str(x)
    return (["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
            + ["| " + " | ".join(fmt(x) for x in r) + " |" for r in rows])


def sync(device: str) -> None:
    import torch
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def timed(fn, device: str, repeats: int, warmup: int = 1):
    """(median seconds, min seconds, last result) of ``fn()`` after ``warmup`` calls."""
    for _ in range(warmup):
        fn()
    times, out = [], None
    for _ in range(repeats):
        sync(device)
        t0 = time.perf_counter()
        out = fn()
        sync(device)
        times.append(time.perf_counter() - t0)
    return statistics.median(times), min(times), out


class PeakMemory:
    """Peak device memory (MiB) allocated inside the block above what was allocated before it."""

    def __init__(self, device: str):
        self.device, self.mib = device, float("nan")

    def __enter__(self):
        import torch
        if self.device.startswith("cuda"):
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            self.base = torch.cuda.memory_allocated()
        return self

    def __exit__(self, *exc):
        import torch
        if self.device.startswith("cuda"):
            torch.cuda.synchronize()
            self.mib = (torch.cuda.max_memory_allocated() - self.base) / 2 ** 20


def free_memory() -> None:
    import torch
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def random_model(config, device: str, dtype, seed: int = 0):
    """A model of ``config`` with random weights, built directly on ``device`` (no download)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText

    from soft_spatial.models.loading import is_vision_language
    auto = AutoModelForImageTextToText if is_vision_language(config) else AutoModelForCausalLM
    torch.manual_seed(seed)
    with torch.device(device):
        model = auto.from_config(config, dtype=dtype, attn_implementation="sdpa")
    return model.eval()


def random_controller(hidden: int, seed: int = 0):
    """An AdaptSoft with random (non-initial) weights, so τ varies by step."""
    from controller_helpers import trained_controller
    return trained_controller(hidden, seed=seed)


# -- a: the embedded engine ------------------------------------------------------------------
def image_prompts(n: int, side: int):
    from PIL import Image
    out = []
    for i in range(n):
        img = Image.new("RGB", (side, side), (40 * i % 255, 90, 200 - 20 * i % 200))
        for x in range(0, side, 8):  # some structure, so images differ beyond their colour
            img.putpixel((x, (x * (i + 3)) % side), (255, 255, 255))
        out.append([{"role": "user", "content": [
            {"type": "image", "image": img},
            {"type": "text", "text": f"Question {i}: is the red cube left of the chair? "
                                     f"A. yes B. no C. cannot tell D. both"}]}])
    return out


def stage_a(ctx: Ctx) -> list[str]:
    import torch

    from soft_spatial.engines import LocalEngine
    from soft_spatial.models.tiny import build_processor, build_tokenizer, tiny_config
    from soft_spatial.models.shapes import check_config
    from soft_spatial.softthink import SamplingConfig, SoftThinkingConfig

    dev = ctx.device
    prompts_n, g, steps, side = (2, 2, 8, 64) if ctx.dry_run else (8, 8, 64 if ctx.quick else 128, 320)
    tok = build_tokenizer("qwen")
    shape = {} if ctx.dry_run else dict(QWEN3_VL_8B)
    config = check_config(tiny_config("qwen3_vl", tok, **shape), "stage a's model")
    t0 = time.perf_counter()
    model = random_model(config, dev, ctx.dtype)
    sync(dev)
    build_s = time.perf_counter() - t0
    n_params = sum(p.numel() for p in model.parameters())
    processor = build_processor("qwen3_vl", tok)
    processor.image_processor.size = {"shortest_edge": 32 * 32, "longest_edge": 128 * 32 * 32}
    eng = LocalEngine(model, tok, processor, max_batch_rows=prompts_n * g, name="qwen3-vl-8b-shape")
    eng.eos_ids = []  # fixed-length decoding: every mode runs the same number of steps
    eng.set_controller(random_controller(eng.hidden_size))
    prompts = image_prompts(prompts_n, side)
    lines = [f"Model: Qwen3-VL-8B-Thinking shape, random weights, {n_params / 1e9:.2f} B parameters, "
             f"{str(ctx.dtype).replace('torch.', '')}, built on {dev} in {build_s:.1f} s."]

    # 1. soft decoding in the limit (noise 0, τ→0) is greedy decoding
    lines += ["", *greedy_limit(eng, prompts, steps, ctx)]
    # 2. throughput, modes interleaved across repeats
    sampling = SamplingConfig(max_new_tokens=steps)
    confs = {m: SoftThinkingConfig(mode=m) for m in MODES}
    eng.generate(prompts[:1], soft_thinking=confs["adaptsoft"], sampling=SamplingConfig(max_new_tokens=4))
    repeats = 1 if ctx.dry_run else 2
    best = {}
    for rep in range(repeats):
        for m, conf in confs.items():
            totals = eng.enable_timing()
            with PeakMemory(dev) as mem:
                sync(dev)
                t0 = time.perf_counter()
                outs = eng.generate(prompts, soft_thinking=conf, sampling=sampling, n=g, seed=rep)
                sync(dev)
                dt = time.perf_counter() - t0
            toks = sum(len(o.token_ids) for o in outs)
            if m not in best or toks / dt > best[m]["tps"]:
                best[m] = {"tps": toks / dt, "totals": dict(totals), "dt": dt, "mem": mem.mib}
    eng.enable_timing(False)
    rows = []
    for m, r in best.items():
        per = {k: 1e3 * r["totals"].get(k, 0.0) / steps for k in ("sample", "mixture", "forward")}
        rows.append([m, round(r["tps"], 1), round(r["tps"] / best["hard"]["tps"], 3),
                     round(per["sample"], 2), round(per["mixture"], 2), round(per["forward"], 2),
                     round(r["totals"].get("prefill", 0.0), 2), round(r["mem"], 0)])
    lines += ["", f"Decode throughput: {prompts_n} prompts × G={g} = {prompts_n * g} rows, "
              f"{side}×{side} images, {steps} steps (eos ignored), best of {repeats}:", ""]
    lines += table(["mode", "tok/s", "× hard", "sample ms/step", "mixture ms/step",
                    "forward ms/step", "prefill s", "peak extra MiB"], rows)
    del eng, model
    free_memory()
    if not ctx.dry_run:  # the limit again in fp32, where the top-2 logits practically never tie
        model = random_model(config, dev, torch.float32)
        eng = LocalEngine(model, tok, processor, max_batch_rows=prompts_n, name="fp32")
        eng.eos_ids = []
        lines += ["", "The same check with the model in fp32:", "",
                  *greedy_limit(eng, prompts, steps, ctx)]
        del eng, model
        free_memory()
    return lines


def greedy_limit(eng, prompts, steps: int, ctx: Ctx) -> list[str]:
    """Soft decoding with noise 0 and τ=1e-30 against hard greedy decoding, token for token.

    With τ this small softmax(z/τ) is exactly one-hot in fp32, so the mixture is the spine's
    embedding, unless the two largest candidate logits tie exactly (common with bf16 logits, whose
    spacing is 2⁻⁷ relative); then the mixture is an even blend and the runs part. A run that
    parts before its first tie is a failure.
    """
    from soft_spatial.softthink import SamplingConfig, SoftThinkingConfig

    greedy = SamplingConfig(max_new_tokens=steps, greedy=True)
    hard = eng.generate(prompts, soft_thinking=SoftThinkingConfig(mode="hard"), sampling=greedy)
    again = eng.generate(prompts, soft_thinking=SoftThinkingConfig(mode="hard"), sampling=greedy)
    repeat = sum(a.token_ids == b.token_ids for a, b in zip(hard, again))
    soft = eng.generate(prompts, soft_thinking=SoftThinkingConfig(mode="fixed", noise_scale=0.0,
                                                         fixed_tau=1e-30), sampling=greedy,
                        debug=True)
    same = unexplained = ties = 0
    detail = []
    for h, s in zip(hard, soft):
        part = next((i for i, (a, b) in enumerate(zip(h.token_ids, s.token_ids)) if a != b), None)
        lp = s.debug["logp"]
        tie_steps = (lp[:, 0] == lp[:, 1]).nonzero().flatten().tolist()
        first_tie = tie_steps[0] if tie_steps else None
        ties += first_tie is not None
        if part is None:
            same += 1
        elif first_tie is None or first_tie > part:
            unexplained += 1
        detail.append(f"{part if part is not None else '–'}/{first_tie if first_tie is not None else '–'}")
    dtype = str(eng.dtype).replace("torch.", "")
    out = [f"Greedy limit ({dtype}): {same}/{len(hard)} prompts decode the same {steps} tokens "
           f"with soft (noise 0, τ=1e-30) as with hard greedy decoding; {ties} prompts met an exact "
           f"tie of their top-2 logits; {unexplained} parted before any tie "
           f"(first differing step / first tie per prompt: {', '.join(detail)}). Hard greedy "
           f"decoding run twice: {repeat}/{len(hard)} prompts identical (the run-to-run floor)."]
    if unexplained:
        ctx.notes.append(f"a: {unexplained} prompts left greedy decoding before any tie ({dtype})")
    return out


# -- b: softthink at real sizes --------------------------------------------------------------
def stage_b(ctx: Ctx) -> list[str]:
    import bench_alignment as BA

    dev = ctx.device
    if ctx.dry_run:
        v, d, sizes, naive_steps = 1000, 64, [256], 4
    else:
        v, d, sizes, naive_steps = 151_936, 4096, ([2048, 8192] if ctx.quick else
                                                   [2048, 8192, 32_768]), 8
    lines = [f"Exact gradient alignment (`alignment_scores`, fp32) against the naive form (dense "
             f"G_ref once, then one V×D outer product per step, timed on {naive_steps} steps and "
             f"scaled to N): V={v}, D={d}, K={BA.K}, 25% reference steps plus {BA.N_DENSE} dense ones.", ""]
    rows = []
    for n in sizes:
        rows.append(_alignment_row(dev, v, d, n, naive_steps))
        free_memory()  # the row's tensors died with its frame
    lines += table(["N", "ours ms", "ours MiB", "naive s (scaled)", "naive MiB", "time ×",
                    "memory ×", "rel. err (first steps)"], rows)
    lines += ["", *_softthink_op_table(ctx, v, d)]
    free_memory()
    return lines


def _alignment_row(dev: str, v: int, d: int, n: int, naive_steps: int) -> list:
    """One row of stage b's alignment table: ours against the naive form at N = ``n`` steps."""
    import torch

    import bench_alignment as BA
    from soft_spatial.softthink import alignment_scores

    args = [x.to(dev) if isinstance(x, torch.Tensor) else x for x in BA._inputs(v, d, n, device=dev)]
    with PeakMemory(dev) as mem:
        t_ours, _, alpha = timed(lambda: alignment_scores(*args), dev, repeats=3)
    with PeakMemory(dev) as mem_n:  # G_ref once, its steps timed on a few and scaled to N
        t_gref, _, g_ref = timed(lambda: BA._naive_gref(args[2], args[3], v, device=dev), dev,
                                 repeats=1, warmup=0)
        t_steps, _, ref = timed(lambda: BA._naive_steps(args[0], args[1], g_ref, naive_steps),
                                dev, repeats=1, warmup=0)
    err = float((alpha[:naive_steps] - ref).norm() / ref.norm().clamp(min=1e-30))
    t_naive_n = t_gref + t_steps * n / naive_steps
    return [n, round(t_ours * 1e3, 2), round(mem.mib, 1), round(t_naive_n, 2),
            round(mem_n.mib, 1), round(t_naive_n / t_ours, 1),
            round(mem_n.mib / max(mem.mib, 1e-3), 1), f"{err:.1e}"]


def _softthink_op_table(ctx: Ctx, v: int, d: int) -> list[str]:
    """Stage b's second table: density, replay and the per-step likelihood from logits."""
    import torch

    from soft_spatial.softthink import gumbel_log_density, record_input_embeddings, step_log_likelihood

    dev = ctx.device
    g = torch.Generator(device=dev).manual_seed(0)
    k, big = 5, (4096 if ctx.dry_run else 1 << 20)
    z = torch.randn(big, k, device=dev, generator=g)
    logp = torch.log_softmax(torch.randn(big, k, device=dev, generator=g), -1).requires_grad_(True)
    t_dens, _, _ = timed(lambda: gumbel_log_density(z, logp).sum().backward(), dev, repeats=5)
    emb = (torch.randn(v, d, device=dev, generator=g) * 0.02).to(ctx.dtype).requires_grad_(True)
    nrec = 1024 if ctx.dry_run else 32_768
    ids = torch.randint(0, v, (nrec, k), device=dev, generator=g)
    scores = torch.randn(nrec, k, device=dev, generator=g)
    tau = torch.full((nrec,), 0.5, device=dev, requires_grad=True)
    soft = torch.rand(nrec, device=dev, generator=g) < 0.9

    def replay():
        out = record_input_embeddings(emb, ids, scores, tau, soft)
        out.float().square().sum().backward()
    with PeakMemory(dev) as mem_r:
        t_rep, _, _ = timed(replay, dev, repeats=5)
    nlog = 256 if ctx.dry_run else 4096
    logits = torch.randn(nlog, v, device=dev, generator=g).to(ctx.dtype).requires_grad_(True)
    lids, lsc, lsoft = ids[:nlog], scores[:nlog], soft[:nlog]
    with PeakMemory(dev) as mem_l:
        t_ll, _, _ = timed(lambda: step_log_likelihood(logits, lids, lsc, lsoft).sum().backward(),
                           dev, repeats=5)
    dtype = str(ctx.dtype).replace("torch.", "")
    return table(["operation (forward + backward)", "size", "ms", "rows/s", "peak extra MiB"], [
        ["Gumbel log-density (eq. 5)", f"{big}×{k}", round(t_dens * 1e3, 3),
         f"{big / t_dens:.3g}", "–"],
        [f"replay embeddings (E {dtype} {v}×{d})", f"{nrec}×{k}", round(t_rep * 1e3, 3),
         f"{nrec / t_rep:.3g}", round(mem_r.mib, 1)],
        [f"per-step likelihood from {dtype} logits", f"{nlog}×{v}", round(t_ll * 1e3, 3),
         f"{nlog / t_ll:.3g}", round(mem_l.mib, 1)]])


# -- c: one actor update through verl's FSDP2 engine -----------------------------------------
def stage_c(ctx: Ctx) -> list[str]:
    import torch

    try:
        import ray  # noqa: F401
        import tensordict  # noqa: F401
        import verl  # noqa: F401
    except ImportError as e:
        raise Skip(f"verl's stack is not installed ({e}); stage its wheels with kit.py") from e
    from soft_spatial.engines import LocalEngine
    from soft_spatial.models.tiny import build_tokenizer, tiny_config
    from soft_spatial.models.shapes import check_config
    from soft_spatial.softthink import SamplingConfig, SoftThinkingConfig

    dev = ctx.device
    rows, n, steps = (4, 2, 8) if ctx.dry_run else (8, 2, 256 if ctx.quick else 1024)
    model_dir = ctx.workdir / "actor_model"
    tok = build_tokenizer("qwen")
    config = check_config(tiny_config("qwen3", tok, **({} if ctx.dry_run else QWEN3_VL_2B_TEXT)),
                          "stage c's model")
    model = random_model(config, dev, ctx.dtype)
    model.save_pretrained(model_dir)
    tok.save_pretrained(model_dir)
    n_params = sum(p.numel() for p in model.parameters())
    eng = LocalEngine(model, tok, max_batch_rows=rows * n)
    eng.eos_ids = []
    ctrl = random_controller(eng.hidden_size)
    eng.set_controller(ctrl)
    prompts = [[5 + i, 9, 13, 40 + i, 41, 42, 7, 8] for i in range(rows // n)]
    outs = eng.generate(prompts, soft_thinking=SoftThinkingConfig(mode="adaptsoft"), n=n,
                        sampling=SamplingConfig(max_new_tokens=steps))
    batch = ctx.workdir / "actor_batch.pt"
    torch.save({"prompts": [prompts[o.prompt_index] for o in outs], "outs": outs,
                "controller": {"config": ctrl.config_dict(), "state_dict": ctrl.state_dict()}},
               batch)
    del eng, model
    free_memory()
    results, errors = {}, {}
    for mode in ("hard", "soft_fixed", "adaptsoft"):
        cmd = [sys.executable, __file__, "--child", "c", mode, str(model_dir), str(batch)]
        if ctx.dry_run:
            cmd.append("--dry-run")
        res = subprocess.run(cmd, capture_output=True, text=True)
        if res.returncode != 0:
            errors[mode] = res.stderr[-4000:]
            continue
        results[mode] = json.loads(res.stdout.strip().splitlines()[-1])
    h = results.get("hard") or next(iter(results.values()), None)
    rows_t = [[m, round(r["time_s"], 3), round(r["min_s"], 3), round(r["time_s"] / h["time_s"], 2),
               round(r["peak_mib"], 0), round(r["peak_mib"] / max(h["peak_mib"], 1e-3), 2),
               round(r["max_allocated_mib"], 0)] for m, r in results.items()]
    head = ["mode", "update s (median)", "min s", "× hard", "update peak MiB", "× hard",
            "max allocated MiB"]
    if errors:
        raise StageFailed(table(head, rows_t) + [
            ""] + [x for m, e in errors.items() for x in (f"{m} failed:", "```", e, "```")])
    return [f"Model: Qwen3-VL-2B language-model shape (text-only Qwen3, random weights, "
            f"{n_params / 1e9:.2f} B parameters); verl FSDP2 engine, fp32 master weights, "
            f"{'fp32' if ctx.dry_run else 'bf16'} compute, gradient checkpointing "
            f"{'off' if ctx.dry_run else 'on'}; one micro-batch update of {rows} sequences × {steps} response tokens "
            f"(adaptsoft rollouts; `hard` re-scores their spines as a discrete chain), median "
            f"of {h['repeats']} updates after a warm-up, each mode in a fresh process. `hard` is "
            f"verl's stock engine (model type language_model); update peak is the memory an "
            f"update allocates above the weights and optimizer state.",
            "", *table(head, rows_t)]


def child_c(mode: str, model_dir: str, batch_path: str, dry_run: bool) -> dict:
    """One mode's update timing in a fresh process (prints JSON)."""
    import copy
    from functools import partial

    import torch
    cpu = dry_run or not torch.cuda.is_available()
    os.environ.setdefault("VERL_PLATFORM", "cpu" if cpu else "nvidia")
    import test_actor_helpers as H

    from soft_spatial.actor.adaptsoft_trainer import AdaptSoftTrainer
    from soft_spatial.actor.loss import soft_ppo_loss
    from soft_spatial.softthink import AdaptSoft, SoftTrace
    from soft_spatial.integration.platform import init_process_group

    init_method = "file://" + tempfile.mktemp()
    if cpu:
        init_process_group(0, 1, init_method)
    else:
        import torch.distributed as dist
        torch.cuda.set_device(0)
        dist.init_process_group("nccl", init_method=init_method, rank=0, world_size=1)
    data = torch.load(batch_path, weights_only=False)
    prompts, outs = data["prompts"], data["outs"]
    if mode == "hard":
        for o in outs:  # the same tokens, as a discrete chain of thought
            o.trace = SoftTrace.discrete(o.token_ids, o.trace.k, o.trace.feature_dim)
    precision = "fp32" if cpu else "bf16"
    engine = H.make_train_engine(model_dir, model_type="language_model" if mode == "hard"
                           else "soft_language_model", cpu=cpu, param_dtype=precision,
                           gradient_checkpointing=not cpu)
    if mode == "adaptsoft":
        ctrl = AdaptSoft(**data["controller"]["config"])
        ctrl.load_state_dict(data["controller"]["state_dict"])
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


# -- d: SGLang ---------------------------------------------------------------------------------
from soft_spatial.lab.gpu.sglang_args import cpu_args, cuda_args, engine_env  # noqa: E402


def sglang_server_args(dtype: str, device: str, parity: bool = False) -> dict:
    """Stage d's engines: fp32 parity (torch_native attention, no TF32 dots) or bf16 throughput,
    CUDA graphs off, every backend named (soft_spatial.lab.gpu.sglang_args)."""
    if device == "cpu":
        return cpu_args(dtype=dtype)
    return cuda_args(dtype, graphs=False, plugin=True, parity=parity)


def tf32_off() -> list[str]:
    """TF32 off for fp32 parity: in this process (matmul and cuDNN flags) and in every SGLang
    scheduler process started afterwards (``NVIDIA_TF32_OVERRIDE=0`` in their inherited
    environment: cuBLAS and cuDNN then never use TF32). Returns the settings, for the report."""
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    os.environ["NVIDIA_TF32_OVERRIDE"] = "0"
    return ["torch.backends.cuda.matmul.allow_tf32 = False", "torch.backends.cudnn.allow_tf32 = False",
            "NVIDIA_TF32_OVERRIDE=0 for SGLang's processes"]


def param_count(config) -> int:
    """Parameters of a model of ``config`` (built on the meta device: no memory; tied counted once)."""
    import torch
    from transformers import AutoModelForImageTextToText
    with torch.device("meta"):
        model = AutoModelForImageTextToText.from_config(config)
    return sum(p.numel() for p in model.parameters())


def sglang_engine(model, soft, ctrl, dtype: str, ctx: Ctx, parity: bool = False):
    from soft_spatial.engines.sglang.engine import SGLangEngine
    from soft_spatial.lab.gpu.context import env_vars
    args = sglang_server_args(dtype, ctx.device, parity)
    with env_vars(engine_env(parity=parity, native_ops=True)):  # the schedulers inherit it
        eng = SGLangEngine(model, soft, controller=ctrl if soft.mode == "adaptsoft" else None,
                           server_args=args)
    eng.eos_ids = []  # fixed-length decoding: every mode and engine runs the same steps
    return eng


def drift_lines(title: str, a, b, names: tuple[str, str], every: int) -> list[str]:
    """Per-step max |Δ| of rows ``a`` against ``b`` (``parity.per_step_deltas``) and their first
    path divergence, as report lines."""
    from soft_spatial.lab.gpu import parity
    first = parity.describe(parity.first_divergence(a, b, float("inf")), names)
    same = sum(parity.same_path(x, y) for x, y in zip(a, b))
    out = [f"- {title}: {same}/{len(b)} rows on the same path; first path divergence: {first}"]
    out += [f"  - max \\|Δ {f}\\| per step (every {every}): {parity.curve(v, every)}"
            for f, v in parity.per_step_deltas(a, b).items()]
    return out


def stage_d(ctx: Ctx) -> list[str]:
    """SGLang with the soft plugin against the embedded engine: parity on the same weights and
    seeds (fp32, TF32 off, against the embedded engine's fp32 and fp64 runs: docs/sglang.md's
    bound), then decode throughput per mode (CUDA graphs off: the plugin needs them off in
    0.5.12, docs/sglang.md). One engine per mode: the soft settings are server-wide."""
    try:
        import sglang
    except ImportError as e:
        raise Skip(f"sglang is not installed ({e}): on a lent machine install the kit's sglang "
                   f"pack (scripts/gpu/kit.py, docs/gpu.md); on a GPU machine with network: "
                   f"pip install -e .[gpu]") from e
    if ctx.device == "cpu" and os.environ.get("SGLANG_USE_CPU_ENGINE") != "1":
        raise Skip("on the CPU SGLang's engine needs SGLANG_USE_CPU_ENGINE=1 and tests/sglang_stubs "
                   "on PYTHONPATH (as scripts/test.sh runs tests/sglang_real)")
    from transformers import AutoConfig

    from soft_spatial.lab.gpu import parity
    from soft_spatial.engines import LocalEngine
    from soft_spatial.models import build_tiny_model
    from soft_spatial.models.shapes import check_config
    from soft_spatial.models.tiny import DEFAULT_HEAD_INIT_STD, DEFAULT_INIT_STD
    from soft_spatial.softthink import SamplingConfig, SoftThinkingConfig

    dry = ctx.dry_run
    t0 = time.perf_counter()
    # 2B: untied, though the release ties them: a random tied model's last hidden state keeps
    # its input token's embedding, whose own logit then takes the mixtures (one-hot soft steps)
    init = (dict(init_std=DEFAULT_INIT_STD, head_init_std=DEFAULT_HEAD_INIT_STD) if dry
            else dict(parity_init(QWEN3_VL_2B["hidden_size"]), tie_word_embeddings=False))
    model = build_tiny_model(ctx.workdir / "d-model", family="qwen3_vl", vocab="qwen",
                             **dict({} if dry else QWEN3_VL_2B, **init))
    config = check_config(AutoConfig.from_pretrained(model), "stage d's model")
    build_s = time.perf_counter() - t0
    ctrl = ctx.workdir / "d-adaptsoft.pt"
    random_controller(config.text_config.hidden_size).save(ctrl)
    confs = {m: SoftThinkingConfig(mode=m) for m in MODES}
    settings = (["fp32", "SGLang attention torch_native"] if ctx.device == "cpu" else
                ["fp32", "SGLang attention torch_native, vision attention sdpa", *tf32_off()])
    text = config.text_config
    lines = [f"Model: {'tiny' if dry else 'Qwen3-VL-2B'}-shaped Qwen3-VL, random weights, "
             f"{param_count(config) / 1e9:.3f} B parameters (hidden {text.hidden_size}, "
             f"{text.num_hidden_layers} layers, head_dim {text.head_dim}, mrope_section "
             f"{text.rope_parameters['mrope_section']}, tied embeddings "
             f"{config.tie_word_embeddings}, weight std "
             f"{init['init_std']:.3g}, output layer {init['head_init_std']:.3g}), "
             f"written in {build_s:.0f} s; sglang "
             f"{sglang.__version__}, CUDA graphs off."]

    # 1. parity: same weights, seeds and prompts, every mode: the embedded engine in fp32 and
    # fp64 (the reference and its own fp32 drift), then SGLang in fp32
    n_par, g_par, steps_par = (2, 2, 8) if dry else (4, 2, 32)
    par_prompts = image_prompts(n_par, 64 if dry else 224)
    par_sampling = SamplingConfig(temperature=0.8, max_new_tokens=steps_par)
    refs = parity.local_runs(model, ctx.device, confs, par_prompts, par_sampling, g_par, seed=7,
                             controller=ctrl)
    drift = []
    if ctx.drift:  # the embedded engine's own fp32 − fp64 drift over a longer horizon
        steps_dr = 16 if dry else 128
        runs = parity.local_runs(model, ctx.device, confs, par_prompts,
                                 SamplingConfig(temperature=0.8, max_new_tokens=steps_dr), g_par,
                                 seed=11, controller=ctrl)
        drift = ["", f"Self-drift of the embedded engine (`--drift`): fp32 against fp64, "
                     f"{n_par} image prompts × {g_par}, {steps_dr} steps, seed 11:", ""]
        for m in MODES:
            drift += drift_lines(m, runs[m]["float32"], runs[m]["float64"], ("fp32", "fp64"),
                                 1 if dry else 4)
        del runs
    free_memory()

    rows, bad, tps, details = [], [], {}, []
    for m, conf in confs.items():
        want, ref = refs[m]["float32"], refs[m]["float64"]
        eng = sglang_engine(model, conf, ctrl, "float32", ctx, parity=True)
        try:
            got = eng.generate(par_prompts, soft_thinking=conf, sampling=par_sampling, n=g_par, seed=7)
            if dry:
                tps[("sglang", m)] = throughput_of(eng, conf, "cpu", ctx)
        finally:
            eng.close()
        verdicts = parity.row_verdicts(got, want, ref)
        count = {k: sum(v["status"] == k for v in verdicts)
                 for k in ("ok", "ill-conditioned", "path", "bound")}
        same = [(a, b) for a, b in zip(got, want) if parity.same_path(a, b)]
        dev = {k: max((parity.max_abs(a, b, k) for a, b in same), default=float("nan"))
               for k in parity.FLOATS}
        rows.append([m, f"{len(same)}/{len(want)}", dev["loglik"], dev["scores"],
                     dev["tau"] if m == "adaptsoft" else "–",
                     f"{sum(parity.same_path(w, x) for w, x in zip(want, ref))}/{len(ref)}",
                     f"{count['ok'] + count['ill-conditioned']}/{len(ref)}"])
        if count["path"] or count["bound"]:
            bad.append(m)
        details += [f"**{m}** — rows: {count['ok']} ok, {count['ill-conditioned']} ill-conditioned "
                    f"(local fp32 leaves fp64's path), {count['path']} off the path, "
                    f"{count['bound']} beyond the bound"]
        details += [f"- row {r}: {v['field']} max\\|Δ\\| {v['dev']:.3g} > bound {v['bound']:.3g} "
                    f"over {v['steps']} steps" for r, v in enumerate(verdicts) if v["status"] == "bound"]
        details += [f"- row {r}: local fp32 leaves fp64's path after {v['fp32_path']} steps, SGLang "
                    f"after {v['path']}" for r, v in enumerate(verdicts)
                    if v["status"] == "ill-conditioned"]
        if 2 * count["ill-conditioned"] > len(ref):
            ctx.notes.append(f"d: {m}: the embedded engine's own fp32 run leaves its fp64 path in "
                             f"{count['ill-conditioned']}/{len(ref)} rows within {steps_par} steps "
                             f"(amplification): parity is bounded only on the steps they share")
        details += [f"- first difference beyond {parity.ATOL:g}, SGLang against local fp64: "
                    + parity.describe(parity.first_divergence(got, ref, parity.ATOL),
                                      ("SGLang", "fp64"))]
        details += drift_lines("SGLang against local fp32", got, want, ("SGLang", "fp32"), 1)
        details += drift_lines("SGLang against local fp64", got, ref, ("SGLang", "fp64"), 1)
        details += drift_lines("local fp32 against local fp64", want, ref, ("fp32", "fp64"), 1)
        details.append("")
    del refs
    lines += ["", f"Parity with the embedded engine ({'; '.join(settings)}; {n_par} image prompts × "
              f"{g_par} samples, {steps_par} steps, seed 7). Bound per row and field "
              f"(docs/sglang.md): max\\|SGLang − local fp64\\| ≤ {parity.ATOL:g} + "
              f"{parity.AMPLIFICATION:g} · max\\|local fp32 − local fp64\\|; max deviations "
              f"over the rows on local fp32's path:", ""]
    lines += table(["mode", "same path", "max \\|Δ loglik\\|", "max \\|Δ scores\\|", "max \\|Δ τ\\|",
                    "local fp32 on fp64's path", "within the bound"], rows)
    lines += ["", *details] + drift
    if bad:
        ctx.notes.append(f"d: SGLang failed the fp32 parity bound in {bad} (see the rows)")

    # 2. throughput: one batch per mode on SGLang (the parity engines in a dry run, bf16 ones on
    # a GPU) and locally
    if not dry:
        for m, conf in confs.items():
            eng = sglang_engine(model, conf, ctrl, "bfloat16", ctx)
            try:
                tps[("sglang", m)] = throughput_of(eng, conf, "cpu", ctx)  # generate returns when done
            finally:
                eng.close()
    local = LocalEngine.from_pretrained(model, device=ctx.device, dtype=ctx.dtype, controller=ctrl,
                                        max_batch_rows=4 if dry else 64)
    local.eos_ids = []
    for m, conf in confs.items():
        tps[("local", m)] = throughput_of(local, conf, ctx.device, ctx)
    del local
    free_memory()
    n, g, steps = throughput_shape(ctx)
    lines += ["", f"Decode throughput ({'float32' if dry else 'bfloat16'}, {n} prompts × G={g}, "
              f"{steps} steps, eos ignored; SGLang's time includes its prompt prefill and "
              f"scheduling):", ""]
    lines += table(["mode", "SGLang tok/s", "× SGLang hard", "embedded tok/s", "SGLang / embedded"],
                   [[m, round(tps[("sglang", m)], 1),
                     round(tps[("sglang", m)] / tps[("sglang", "hard")], 3),
                     round(tps[("local", m)], 1),
                     round(tps[("sglang", m)] / tps[("local", m)], 3)] for m in MODES])
    if bad:
        raise StageFailed(lines)
    return lines


def throughput_shape(ctx: Ctx) -> tuple[int, int, int]:
    """(prompts, samples per prompt, steps) of stage d's throughput batch."""
    return (2, 2, 8) if ctx.dry_run else (8, 8, 64 if ctx.quick else 128)


def throughput_of(eng, conf, sync_device: str, ctx: Ctx) -> float:
    """Decode tok/s of ``eng`` on stage d's throughput batch (each repeat prefills afresh)."""
    from soft_spatial.softthink import SamplingConfig
    n, g, steps = throughput_shape(ctx)
    prompts = image_prompts(n, 64 if ctx.dry_run else 320)
    eng.generate(prompts[:1], soft_thinking=conf, sampling=SamplingConfig(max_new_tokens=4))

    def run():
        if hasattr(eng, "backend"):
            eng.backend.flush_cache()
        return eng.generate(prompts, soft_thinking=conf, sampling=SamplingConfig(max_new_tokens=steps),
                            n=g, seed=1)
    sec, _, outs = timed(run, sync_device, repeats=1 if ctx.dry_run else 2, warmup=0)
    return sum(len(o.token_ids) for o in outs) / sec


STAGES = {"a": ("a. Embedded engine on CUDA (Qwen3-VL-8B shape)", stage_a),
          "b": ("b. softthink at real sizes", stage_b),
          "c": ("c. One actor update through verl's FSDP2 engine", stage_c),
          "d": ("d. SGLang soft rollout", stage_d),
          "e": ("e. GRPO through verl with SGLang rollouts on one GPU",  # soft_spatial/lab/gpu/grpo.py
                lambda ctx: stage_e(ctx)),
          "f": ("f. SGLang soft decoding under CUDA graphs",  # scripts/gpu/stage_f.py
                lambda ctx: __import__("stage_f").stage_f(ctx))}


def stage_e(ctx: Ctx) -> list[str]:
    """Step 1 with its checkpoint, then a resume to step 2 (soft_spatial.lab.gpu.grpo), each run
    within ``$SOFT_SPATIAL_STAGE_E_TIMEOUT`` seconds of the stage's start (default 900)."""
    from soft_spatial.lab.gpu import grpo
    deadline = time.time() + float(os.environ.get("SOFT_SPATIAL_STAGE_E_TIMEOUT", 900))
    _, lines = grpo.run(out=ctx.report.path.parent / "stage-e", work=ctx.workdir / "e",
                        dry=ctx.dry_run, quick=ctx.quick, deadline_at=deadline, plan=grpo.RESUME)
    return lines


def versions() -> str:
    out = [f"Python {platform.python_version()}"]
    for name in ("torch", "transformers", "verl", "ray", "sglang"):
        try:
            mod = __import__(name)
            out.append(f"{name} {mod.__version__}")
        except ImportError:
            out.append(f"{name} –")
    return ", ".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 2)[2])
    ap.add_argument("--stages", default="a,b,c,d,e,f", help="comma-separated stages (default all)")
    ap.add_argument("--out", default="gpu-report.md", help="Markdown report path")
    ap.add_argument("--dry-run", action="store_true",
                    help="run every stage's logic on the CPU at tiny sizes (no GPU needed)")
    ap.add_argument("--quick", action="store_true", help="smaller real sizes (fewer steps)")
    ap.add_argument("--drift", action="store_true",
                    help="stage d: also measure the embedded engine's fp32 − fp64 drift per step "
                         "over a longer horizon (the amplification the parity bound allows for)")
    ap.add_argument("--plan", choices=["headline"],
                    help="run a plan instead of stages: 'headline' is F, D and E in one device "
                         "call (soft_spatial/lab/gpu/headline.py); --out is then a directory")
    ap.add_argument("--deadline", type=float, default=510.0,
                    help="--plan: seconds every part must end within (default 510)")
    ap.add_argument("--work", help="--plan: scratch directory (default: a temporary one)")
    ap.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.plan:
        from soft_spatial.lab.gpu import headline
        out = "gpu-headline" if a.out == "gpu-report.md" else a.out
        return headline.main(["--out", out, "--deadline", str(a.deadline)]
                             + ["--dry-run"] * a.dry_run + (["--work", a.work] if a.work else []))
    if a.child:
        _, mode, model_dir, batch = a.child
        print(json.dumps(child_c(mode, model_dir, batch, a.dry_run)))
        return 0
    import torch
    stages = [s.strip() for s in a.stages.split(",") if s.strip()]
    unknown = [s for s in stages if s not in STAGES]
    if unknown:
        ap.error(f"unknown stages {unknown}; choose from {sorted(STAGES)}")
    if not a.dry_run and not torch.cuda.is_available():
        ap.error("no CUDA device: run on a GPU machine, or pass --dry-run")
    device = "cpu" if a.dry_run else "cuda"
    gpu = "CPU (dry run)" if a.dry_run else torch.cuda.get_device_name(0)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip() or "unknown"
    header = [f"# GPU kit report ({datetime.date.today().isoformat()})", "",
              f"Device: {gpu}. {versions()}. Commit {commit}"
              + (" (dry run: tiny sizes on the CPU)" if a.dry_run else "") + ".", ""]
    report = Report(Path(a.out), header)
    with tempfile.TemporaryDirectory(prefix="gpukit-") as tmp:
        ctx = Ctx(a.dry_run, a.quick, device, report, Path(tmp), drift=a.drift)
        failed = 0
        for s in stages:
            title, fn = STAGES[s]
            print(f"== {title}", flush=True)
            t0 = time.perf_counter()
            try:
                lines, status = fn(ctx), "ok"
            except Skip as e:
                lines, status = [str(e)], "skipped"
            except StageFailed as e:
                failed += 1
                lines, status = e.lines, "failed"
            except Exception:
                failed += 1
                lines, status = ["```", traceback.format_exc()[-6000:], "```"], "failed"
                free_memory()
            report.add(title, status, lines, time.perf_counter() - t0)
            print("\n".join([status] + lines), flush=True)
        if ctx.notes:
            report.add("Findings", "attention", [f"- {x}" for x in ctx.notes], 0.0)
    print(f"report: {a.out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
