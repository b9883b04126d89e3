"""SGLang 0.5.12 with the soft plugin on this CPU: decode throughput (soft vs hard vs the local
engine, same batch) and prefill tokens per prompt group (radix cache on vs off), in one run.

    bash scripts/setup_sglang_overlay.sh             # once
    .venv/bin/python scripts/bench_sglang.py         # 4 image prompts × G=4, 48 steps, Qwen vocab
    .venv/bin/python scripts/bench_sglang.py --prompts 8 --n 8 --steps 64 --vocab small
    .venv/bin/python scripts/bench_sglang.py --steps 24 --repeats 3 --no-prefill   # shorter

Runs SGLang's real offline engine (scheduler process, KV pool, radix cache, Qwen3-VL forward)
exactly as tests/sglang_real does: the sglang overlay and the CPU stand-ins of tests/sglang_stubs
on PYTHONPATH (the script re-executes itself with them; nothing is imported from tests/ by name),
``torch_native`` attention, fp32, CUDA graphs off. Every engine decodes the same image prompts
for the same number of steps (end of sequence ignored).

Time: the local engine (in this process) and two SGLang engines (hard, soft: SGLang's soft
settings are server-wide) live side by side, each SGLang engine in its own worker process (SGLang's
shutdown kills every child of the process that started it), its scheduler started with
``sleep_on_idle`` (an idle scheduler otherwise spins on a core and would slow the others). The
four modes are measured in turns whose order rotates every repeat
(`soft_spatial_bench.workloads.interleaved`), one measurement being one whole batched ``generate``, after a
warm-up per mode. Printed: min, median and spread ((max - min) / median) of the seconds per mode,
the time ratios to SGLang hard (of minima, medians and paired per turn), tokens/s, and the
throughput ratios SGLang soft / SGLang hard,
SGLang / local (soft and hard) and local soft / local hard, of the minima and of the medians.
Prefill (counts, not time; skipped with ``--no-prefill``): from the scheduler's batch log, the
tokens prefilled per prompt group of G samples with the radix cache on (the default: the prompt is
prefilled once, each sample then computes its last token) and off (every sample prefills the
whole prompt; one more engine, started after the timing).
CPU numbers say nothing about GPU speed: on a CPU SGLang's scheduler overhead per step is
comparable to a tiny model's forward.

CUDA graphs: unavailable on the CPU (SGLang 0.5.12 captures them only on CUDA; its CPU graph
runner needs the intel_amx attention backend and sgl-kernel's CPU build), so every engine here
decodes without them, and the output says so. On a GPU, ``--device cuda`` runs the GPU kit's
like-for-like F jobs instead (``scripts/gpu/check.py --plan headline --only ...``: stock SGLang
hard against the plugin's fixed and adaptsoft, graphs on, 64 and 8 rows, docs/gpu.md), and with
``--overlap`` also the plugin's overlap-on jobs and the fp32 overlap parity:

    python scripts/bench_sglang.py --device cuda [--overlap]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from soft_spatial_bench.overlay import reexec_with_sglang_overlay

ROOT = Path(__file__).resolve().parents[1]
BATCH_LOG = "SOFT_SPATIAL_SGLANG_BATCH_LOG"  # tests/sglang_stubs/sglang_cpu
CPU_ARGS = dict(device="cpu", attention_backend="torch_native", grammar_backend="none",
                dtype="float32", skip_server_warmup=True, mem_fraction_static=0.5,
                max_total_tokens=16384, log_level="error", sleep_on_idle=True)


def prompts(k: int):
    from PIL import Image
    out = []
    for i in range(k):
        img = Image.new("RGB", (224, 160 + 32 * (i % 3)), (40 * i % 255, 90, 200 - 20 * i % 200))
        out.append([{"role": "user", "content": [
            {"type": "image", "image": img},
            {"type": "text", "text": f"Question {i}: which object is closer to the camera, the "
                                     f"red box or the blue ball? A. box B. ball"}]}])
    return out


def prefill_per_group(log: Path, n: int):
    """Tokens prefilled per prompt group, from the scheduler's batch log (rid soft-<tag>-i-j)."""
    per = defaultdict(int)
    for line in log.read_text().splitlines():
        b = json.loads(line)
        if b["mode"] == "EXTEND":
            for rid, _, tokens in b["rows"]:
                per[rid.split("-")[2]] += tokens
    return sorted(per.values())


SOFT = {"hard": dict(mode="hard"), "soft": dict(mode="fixed")}  # SoftThinkingConfig per mode


def _serve(conn, a, path: str, mode: str, log: str, radix: bool) -> None:
    """One SGLang engine in this (spawned) process, answering the parent's requests on ``conn``:
    "generate" -> (seconds, tokens) of one batched generate, "prefill" -> tokens prefilled per
    prompt group (cold cache), anything else -> shut down. Its own process because SGLang's
    ``Engine.shutdown`` kills every child of the process that started it."""
    from soft_spatial.engines.sglang.engine import SGLangEngine
    from soft_spatial.softthink import SamplingConfig, SoftThinkingConfig

    os.environ[BATCH_LOG] = log  # read by the scheduler process at its start
    soft, ps = SoftThinkingConfig(**SOFT[mode]), prompts(a.prompts)
    eng = SGLangEngine(path, soft, server_args=dict(CPU_ARGS, disable_radix_cache=not radix))
    try:
        eng.eos_ids = []  # fixed-length decoding (SGLang ignores eos)
        eng.generate(ps[:1], soft_thinking=soft, sampling=SamplingConfig(temperature=1.0,
                                                                max_new_tokens=4))  # warm-up
        conn.send("ready")
        sampling = SamplingConfig(temperature=1.0, max_new_tokens=a.steps)
        while (cmd := conn.recv()) in ("generate", "prefill"):
            if cmd == "generate":
                t0 = time.perf_counter()
                outs = eng.generate(ps, soft_thinking=soft, sampling=sampling, n=a.n, seed=0)
                conn.send((time.perf_counter() - t0, sum(len(o.token_ids) for o in outs)))
            else:
                eng.backend.flush_cache()
                Path(log).unlink(missing_ok=True)
                eng.generate(ps, soft_thinking=soft, sampling=SamplingConfig(max_new_tokens=1), n=a.n,
                             seed=0)
                conn.send(prefill_per_group(Path(log), a.n))
    finally:
        eng.close()


class Worker:
    """The parent's handle on a `_serve` process."""

    def __init__(self, *args):
        import multiprocessing as mp
        ctx = mp.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_serve, args=(child, *args))  # not daemonic: SGLang forks
        self.proc.start()

    def ask(self, cmd: str):
        self.conn.send(cmd)
        return self.conn.recv()

    def ready(self) -> None:
        if self.conn.recv() != "ready":
            raise RuntimeError("bench_sglang: an SGLang worker failed to start")

    def close(self) -> None:
        if self.proc.is_alive():
            try:
                self.conn.send("close")
            except OSError:
                pass
            self.proc.join(timeout=120)
        if self.proc.is_alive():
            self.proc.terminate()
            self.proc.join(timeout=30)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", help="model directory (default: build a tiny Qwen3-VL)")
    ap.add_argument("--vocab", default="qwen", choices=["qwen", "small"])
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--n", type=int, default=4, help="samples per prompt (GRPO's G)")
    ap.add_argument("--steps", type=int, default=48)
    ap.add_argument("--repeats", type=int, default=3, help="turns of the four modes")
    ap.add_argument("--no-prefill", action="store_true",
                    help="skip the prefill counts (and the radix-cache-off engine)")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"],
                    help="cuda: the GPU kit's F jobs on a GPU (docs/gpu.md)")
    ap.add_argument("--overlap", action="store_true",
                    help="--device cuda: also the plugin's overlap-on jobs and overlap parity")
    a = ap.parse_args()
    if a.device == "cuda":
        jobs = ["model/build", "F/stock-hard-overlap-off", "F/plugin-fixed", "F/plugin-adaptsoft"]
        jobs += ["F/stock-hard", "F/plugin-fixed-overlap-on", "F/plugin-adaptsoft-overlap-on",
                 "X/overlap-parity"] if a.overlap else []
        sys.exit(subprocess.call([sys.executable, str(ROOT / "scripts" / "gpu" / "check.py"),
                                  "--plan", "headline", "--only", ",".join(jobs),
                                  "--out", "bench-sglang-gpu", "--deadline", "3600"]))
    reexec_with_sglang_overlay("bench_sglang")

    from soft_spatial_bench.workloads import interleaved
    from soft_spatial.engines import LocalEngine
    from soft_spatial.models import build_tiny_model
    from soft_spatial.softthink import SamplingConfig, SoftThinkingConfig

    tmp = Path(tempfile.mkdtemp(prefix="bench_sglang_"))
    path = str(a.model or build_tiny_model(tmp / "tiny", family="qwen3_vl", vocab=a.vocab))
    ps = prompts(a.prompts)
    sampling = SamplingConfig(temperature=1.0, max_new_tokens=a.steps)
    local = LocalEngine.from_pretrained(path, max_batch_rows=a.prompts * a.n)
    local.eos_ids = []  # fixed-length decoding
    workers, prefill, tokens = {}, {}, {}
    try:
        for m in SOFT:  # both start at once; each waits idle (sleep_on_idle) while others run
            workers[f"sglang {m}"] = Worker(a, path, m, str(tmp / f"batches-{m}.jsonl"), True)
        for m in SOFT:  # warm-up
            local.generate(ps[:1], soft_thinking=SoftThinkingConfig(**SOFT[m]),
                           sampling=SamplingConfig(temperature=1.0, max_new_tokens=4))
        for w in workers.values():
            w.ready()

        def measure(mode, _):
            if mode in workers:
                dt, tokens[mode] = workers[mode].ask("generate")
                return dt
            t0 = time.perf_counter()
            outs = local.generate(ps, soft_thinking=SoftThinkingConfig(**SOFT[mode.split()[1]]),
                                  sampling=sampling, n=a.n, seed=0)
            tokens[mode] = sum(len(o.token_ids) for o in outs)
            return time.perf_counter() - t0

        timings = interleaved(measure, [f"local {m}" for m in SOFT] + list(workers), a.repeats)
        if not a.no_prefill:
            prefill["on"] = workers["sglang soft"].ask("prefill")
            workers["sglang soft, radix cache off"] = off = Worker(
                a, path, "soft", str(tmp / "batches-off.jsonl"), False)
            off.ready()
            prefill["off"] = off.ask("prefill")
    finally:
        for w in workers.values():
            w.close()

    _print(a, timings, tokens, prefill)


def _print(a, timings, tokens, prefill) -> None:
    """The run's table: seconds per generate, tokens/s, throughput ratios, prefill counts."""
    from soft_spatial_bench.workloads import ratio_lines
    print(f"\ndecode, {a.prompts} image prompts × G={a.n}, {a.steps} steps, vocab {a.vocab}, "
          f"{os.cpu_count()} CPUs, {a.repeats} interleaved turns (seconds per generate):")
    print("CUDA graphs: unavailable on the CPU (every SGLang engine here runs without them; "
          "graphs on vs off: --device cuda on a GPU)")
    print("\n".join(ratio_lines(timings, "sglang hard")))
    print("tokens/s (min, median): " + ", ".join(
        f"{m} {tokens[m] / t.min:.1f}, {tokens[m] / t.median:.1f}" for m, t in timings.items()))
    print("throughput ratios (of minima, of medians):")
    for num, den in (("sglang soft", "sglang hard"), ("sglang soft", "local soft"),
                     ("sglang hard", "local hard"), ("local soft", "local hard")):
        tps = [tokens[num] / getattr(timings[num], s) / (tokens[den] / getattr(timings[den], s))
               for s in ("min", "median")]
        print(f"  {num} / {den}: {tps[0]:.2f}, {tps[1]:.2f}")
    if prefill:
        print(f"\nprefill tokens per prompt group (G={a.n}):")
        for k in ("on", "off"):
            print(f"  radix cache {k:<3}: {prefill[k]}")
        print(f"  off / on: {sum(prefill['off']) / sum(prefill['on']):.2f}")


if __name__ == "__main__":
    main()
