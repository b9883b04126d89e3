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
  d  SGLang 0.5.12 with the soft plugin (needs sglang and its kernels; not staged by default):
     tokens, records and likelihoods against the embedded engine on the same weights and seeds
     (fp32, every mode), then SGLang vs embedded decode throughput per mode (CUDA graphs off).

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

# Published shapes (config.json of the Hugging Face releases); the weights are random.
QWEN3_VL_8B = dict(
    hidden_size=4096, intermediate_size=12288, num_hidden_layers=36, num_attention_heads=32,
    num_key_value_heads=8, head_dim=128, max_position_embeddings=262144, rms_norm_eps=1e-6,
    rope_parameters={"rope_type": "default", "rope_theta": 5e6, "mrope_section": [24, 20, 20],
                     "mrope_interleaved": True},
    vision_config=dict(depth=27, hidden_size=1152, intermediate_size=4304, num_heads=16,
                       out_hidden_size=4096, patch_size=16, num_position_embeddings=2304,
                       deepstack_visual_indexes=[8, 16, 24], hidden_act="gelu_pytorch_tanh"))
QWEN3_VL_2B_TEXT = dict(
    hidden_size=2048, intermediate_size=6144, num_hidden_layers=28, num_attention_heads=16,
    num_key_value_heads=8, head_dim=128, max_position_embeddings=262144, rms_norm_eps=1e-6)
MODES = ("hard", "fixed", "adaptsoft")


class Skip(Exception):
    """A stage cannot run here (missing package or device); the message says why."""


class StageFailed(Exception):
    """A stage failed after measuring part of what it measures (``lines``: those results)."""

    def __init__(self, lines: list[str]):
        super().__init__("\n".join(lines))
        self.lines = lines


@dataclass
class Ctx:
    dry_run: bool
    quick: bool
    device: str
    report: "Report"
    workdir: Path
    notes: list = field(default_factory=list)

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
    from soft_spatial.softthink import SamplingConfig, SoftThinkingConfig

    dev = ctx.device
    prompts_n, g, steps, side = (2, 2, 8, 64) if ctx.dry_run else (8, 8, 64 if ctx.quick else 128, 320)
    tok = build_tokenizer("qwen")
    shape = {} if ctx.dry_run else dict(QWEN3_VL_8B)
    config = tiny_config("qwen3_vl", tok, **shape)
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
    from soft_spatial.softthink import SamplingConfig, SoftThinkingConfig

    dev = ctx.device
    rows, n, steps = (4, 2, 8) if ctx.dry_run else (8, 2, 256 if ctx.quick else 1024)
    model_dir = ctx.workdir / "actor_model"
    tok = build_tokenizer("qwen")
    config = tiny_config("qwen3", tok, **({} if ctx.dry_run else QWEN3_VL_2B_TEXT))
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
    from soft_spatial.platform import init_process_group

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


# -- d: SGLang -------------------------------------------------------------------------------
QWEN3_VL_2B_VISION = dict(depth=24, hidden_size=1024, intermediate_size=4096, num_heads=16,
                          out_hidden_size=2048, patch_size=16, num_position_embeddings=2304,
                          deepstack_visual_indexes=[5, 11, 17], hidden_act="gelu_pytorch_tanh")
# SGLang's engine on this CPU, exactly as tests/sglang_real runs it (docs/sglang.md)
SGLANG_CPU_ARGS = dict(device="cpu", attention_backend="torch_native", grammar_backend="none",
                       max_total_tokens=8192)


def same_path(a, b) -> bool:
    """Two completions took the same decoding path: tokens, stop, soft steps, every candidate."""
    import torch
    return (a.token_ids == b.token_ids and a.finish_reason == b.finish_reason
            and torch.equal(a.trace.soft, b.trace.soft)
            and torch.equal(a.trace.topk_ids, b.trace.topk_ids))


def max_dev(got, want, key: str) -> float:
    """max |got − want| of a record field (``loglik``: the per-step log-likelihoods)."""
    import torch
    if key == "loglik":
        x, y = torch.tensor(got.logprobs), torch.tensor(want.logprobs)
    else:
        x, y = getattr(got.trace, key).float(), getattr(want.trace, key).float()
    return float((x - y).abs().max()) if x.numel() else 0.0


def sglang_engine(model, soft, ctrl, dtype: str, ctx: Ctx):
    from soft_spatial.engines.sglang.engine import SGLangEngine
    args = dict(dtype=dtype, skip_server_warmup=True, mem_fraction_static=0.5, log_level="error")
    if ctx.device == "cpu":
        args.update(SGLANG_CPU_ARGS)
    eng = SGLangEngine(model, soft, controller=ctrl if soft.mode == "adaptsoft" else None,
                       server_args=args)
    eng.eos_ids = []  # fixed-length decoding: every mode and engine runs the same steps
    return eng


def stage_d(ctx: Ctx) -> list[str]:
    """SGLang with the soft plugin against the embedded engine: parity on the same weights and
    seeds (fp32), then decode throughput per mode (CUDA graphs off: the plugin needs them off in
    0.5.12, docs/sglang.md). One engine per mode: the soft settings are server-wide."""
    try:
        import sglang
    except ImportError as e:
        raise Skip(f"sglang is not installed ({e}): its kernels (sglang-kernel, flashinfer: about "
                   f"700 MiB of wheels, 12+ calls on a lent machine) are not staged by default; "
                   f"on a GPU machine with network: pip install -e .[gpu]") from e
    if ctx.device == "cpu" and os.environ.get("SGLANG_USE_CPU_ENGINE") != "1":
        raise Skip("on the CPU SGLang's engine needs SGLANG_USE_CPU_ENGINE=1 and tests/sglang_stubs "
                   "on PYTHONPATH (as scripts/test.sh runs tests/sglang_real)")
    import torch

    from soft_spatial.engines import LocalEngine
    from soft_spatial.models import build_tiny_model
    from soft_spatial.softthink import SamplingConfig, SoftThinkingConfig

    dry = ctx.dry_run
    shape = {} if dry else dict(QWEN3_VL_2B_TEXT, vision_config=QWEN3_VL_2B_VISION)
    t0 = time.perf_counter()
    model = build_tiny_model(ctx.workdir / "d-model", family="qwen3_vl", vocab="qwen", **shape)
    build_s = time.perf_counter() - t0
    local = LocalEngine.from_pretrained(model, device=ctx.device, dtype=torch.float32)
    local.eos_ids = []
    ctrl = ctx.workdir / "d-adaptsoft.pt"
    random_controller(local.hidden_size).save(ctrl)
    local.set_controller(ctrl)
    confs = {m: SoftThinkingConfig(mode=m) for m in MODES}
    n_params = sum(p.numel() for p in local.model.parameters())
    lines = [f"Model: {'tiny' if dry else 'Qwen3-VL-2B'}-shaped Qwen3-VL, random weights, "
             f"{n_params / 1e9:.3f} B parameters, written in {build_s:.0f} s; sglang "
             f"{sglang.__version__}, CUDA graphs off."]

    # 1. parity: same weights, seeds and prompts in fp32, every mode; 2. throughput: one batch
    # per mode on SGLang (fp32 engines reused in a dry run, bf16 ones on a GPU) and locally
    n_par, g_par, steps_par = (2, 2, 8) if dry else (4, 2, 32)
    par_prompts = image_prompts(n_par, 64 if dry else 224)
    par_sampling = SamplingConfig(temperature=0.8, max_new_tokens=steps_par)
    n, g, steps = (2, 2, 8) if dry else (8, 8, 64 if ctx.quick else 128)
    prompts = image_prompts(n, 64 if dry else 320)
    sampling, warm = SamplingConfig(max_new_tokens=steps), SamplingConfig(max_new_tokens=4)
    dtype = "float32" if dry else "bfloat16"
    repeats = 1 if dry else 2

    def throughput(eng, conf, sync_device):
        eng.generate(prompts[:1], soft_thinking=conf, sampling=warm)

        def run():  # every repeat prefills its prompts afresh
            if hasattr(eng, "backend"):
                eng.backend.flush_cache()
            return eng.generate(prompts, soft_thinking=conf, sampling=sampling, n=g, seed=1)
        sec, _, outs = timed(run, sync_device, repeats=repeats, warmup=0)
        return sum(len(o.token_ids) for o in outs) / sec

    rows, bad, tps = [], [], {}
    for m, conf in confs.items():
        want = local.generate(par_prompts, soft_thinking=conf, sampling=par_sampling, n=g_par, seed=7)
        eng = sglang_engine(model, conf, ctrl, "float32", ctx)
        try:
            got = eng.generate(par_prompts, soft_thinking=conf, sampling=par_sampling, n=g_par, seed=7)
            if dry:
                tps[("sglang", m)] = throughput(eng, conf, "cpu")
        finally:
            eng.close()
        same = [(a, b) for a, b in zip(got, want) if same_path(a, b)]
        dev = {k: max((max_dev(a, b, k) for a, b in same), default=float("nan"))
               for k in ("loglik", "scores", "tau")}
        rows.append([m, f"{len(same)}/{len(want)}", dev["loglik"], dev["scores"],
                     dev["tau"] if m == "adaptsoft" else "–"])
        if len(same) < len(want):
            bad.append(m)
    lines += ["", f"Parity with the embedded engine (fp32, {n_par} image prompts × {g_par} samples, "
              f"{steps_par} steps, same seeds; max deviations over the rows on the same path):", ""]
    lines += table(["mode", "same path", "max |Δ loglik|", "max |Δ scores|", "max |Δ τ|"], rows)
    if bad:
        ctx.notes.append(f"d: SGLang left the embedded engine's decoding path in {bad} (fp32)")
    if not dry:
        del local
        free_memory()
        for m, conf in confs.items():
            eng = sglang_engine(model, conf, ctrl, dtype, ctx)
            try:
                tps[("sglang", m)] = throughput(eng, conf, "cpu")  # generate returns when done
            finally:
                eng.close()
        local = LocalEngine.from_pretrained(model, device=ctx.device, dtype=ctx.dtype,
                                            controller=ctrl, max_batch_rows=n * g)
        local.eos_ids = []
    for m, conf in confs.items():
        tps[("local", m)] = throughput(local, conf, ctx.device)
    del local
    free_memory()
    lines += ["", f"Decode throughput ({dtype}, {n} prompts × G={g}, {steps} steps, eos ignored; "
              f"SGLang's time includes its prompt prefill and scheduling):", ""]
    lines += table(["mode", "SGLang tok/s", "× SGLang hard", "embedded tok/s", "SGLang / embedded"],
                   [[m, round(tps[("sglang", m)], 1),
                     round(tps[("sglang", m)] / tps[("sglang", "hard")], 3),
                     round(tps[("local", m)], 1),
                     round(tps[("sglang", m)] / tps[("local", m)], 3)] for m in MODES])
    if bad:
        raise StageFailed(lines)
    return lines


STAGES = {"a": ("a. Embedded engine on CUDA (Qwen3-VL-8B shape)", stage_a),
          "b": ("b. softthink at real sizes", stage_b),
          "c": ("c. One actor update through verl's FSDP2 engine", stage_c),
          "d": ("d. SGLang soft rollout", stage_d),
          "f": ("f. SGLang soft decoding under CUDA graphs",
                lambda ctx: __import__("stage_f").stage_f(ctx))}


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
    ap.add_argument("--stages", default="a,b,c,d", help="comma-separated stages (default all)")
    ap.add_argument("--out", default="gpu-report.md", help="Markdown report path")
    ap.add_argument("--dry-run", action="store_true",
                    help="run every stage's logic on the CPU at tiny sizes (no GPU needed)")
    ap.add_argument("--quick", action="store_true", help="smaller real sizes (fewer steps)")
    ap.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
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
        ctx = Ctx(a.dry_run, a.quick, device, report, Path(tmp))
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
