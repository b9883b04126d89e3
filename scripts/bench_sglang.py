"""SGLang 0.5.12 with the soft plugin on this CPU: decode throughput (soft vs hard vs the local
engine, same batch) and prefill tokens per prompt group (radix cache on vs off), in one run.

    bash scripts/setup_sglang_overlay.sh             # once
    .venv/bin/python scripts/bench_sglang.py         # 4 image prompts × G=4, 48 steps, Qwen vocab
    .venv/bin/python scripts/bench_sglang.py --prompts 8 --n 8 --steps 64 --vocab small

Runs SGLang's real offline engine (scheduler process, KV pool, radix cache, Qwen3-VL forward)
exactly as tests/sglang_real does: the sglang overlay and tests/sglang_stubs on PYTHONPATH (the
script re-executes itself with them), ``torch_native`` attention, fp32, CUDA graphs off. Every
engine decodes the same image prompts for the same number of steps (end of sequence ignored).

Prints tokens/s per engine and mode and the ratios SGLang soft / SGLang hard, SGLang / local
(soft and hard), and, from the scheduler's batch log, the tokens prefilled per prompt group of G
samples with the radix cache on (the default: the prompt is prefilled once, each sample then
computes its last token) and off (every sample prefills the whole prompt).
CPU numbers say nothing about GPU speed: on a CPU SGLang's scheduler overhead per step is
comparable to a tiny model's forward.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OVERLAY = Path(os.environ.get("SOFT_SPATIAL_SGLANG_OVERLAY", ROOT / ".venv" / "sglang-cpu-overlay"))
STUBS = ROOT / "tests" / "sglang_stubs"
BATCH_LOG = "SOFT_SPATIAL_SGLANG_BATCH_LOG"  # tests/sglang_stubs/sglang_cpu
CPU_ARGS = dict(device="cpu", attention_backend="torch_native", grammar_backend="none",
                dtype="float32", skip_server_warmup=True, mem_fraction_static=0.5,
                max_total_tokens=16384, log_level="error")


def _reexec_with_overlay() -> None:
    """SGLang's test environment in this process and every process SGLang spawns."""
    path = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    if str(OVERLAY) in path and os.environ.get("SGLANG_USE_CPU_ENGINE") == "1":
        return
    if not OVERLAY.is_dir():
        sys.exit(f"bench_sglang: no SGLang overlay at {OVERLAY}; run "
                 f"bash scripts/setup_sglang_overlay.sh")
    env = dict(os.environ, SGLANG_USE_CPU_ENGINE="1", HF_HUB_OFFLINE="1",
               PYTHONPATH=os.pathsep.join([str(OVERLAY), str(STUBS)] + [p for p in path if p]))
    os.execve(sys.executable, [sys.executable, *sys.argv], env)


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


def timed(fn, repeats):
    best, out = float("inf"), None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def prefill_per_group(log: Path, n: int):
    """Tokens prefilled per prompt group, from the scheduler's batch log (rid soft-<tag>-i-j)."""
    per = defaultdict(int)
    for line in log.read_text().splitlines():
        b = json.loads(line)
        if b["mode"] == "EXTEND":
            for rid, _, tokens in b["rows"]:
                per[rid.split("-")[2]] += tokens
    return sorted(per.values())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", help="model directory (default: build a tiny Qwen3-VL)")
    ap.add_argument("--vocab", default="qwen", choices=["qwen", "small"])
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--n", type=int, default=4, help="samples per prompt (GRPO's G)")
    ap.add_argument("--steps", type=int, default=48)
    ap.add_argument("--repeats", type=int, default=2)
    a = ap.parse_args()
    _reexec_with_overlay()

    from soft_spatial.engines import LocalEngine
    from soft_spatial.engines.sglang.engine import SGLangEngine
    from soft_spatial.models import build_tiny_model
    from soft_spatial.softthink import SamplingConfig, SoftThinkingConfig

    tmp = Path(tempfile.mkdtemp(prefix="bench_sglang_"))
    path = a.model or build_tiny_model(tmp / "tiny", family="qwen3_vl", vocab=a.vocab)
    ps = prompts(a.prompts)
    sampling = SamplingConfig(temperature=1.0, max_new_tokens=a.steps)
    warm = SamplingConfig(temperature=1.0, max_new_tokens=4)
    modes = {"hard": SoftThinkingConfig(mode="hard"), "soft": SoftThinkingConfig(mode="fixed")}
    rows = a.prompts * a.n
    tps, prefill = {}, {}

    local = LocalEngine.from_pretrained(path, max_batch_rows=rows)
    local.eos_ids = []  # fixed-length decoding
    for name, soft in modes.items():
        local.generate(ps[:1], soft=soft, sampling=warm)
        sec, outs = timed(lambda: local.generate(ps, soft=soft, sampling=sampling, n=a.n, seed=0),
                          a.repeats)
        tps[f"local {name}"] = sum(len(o.token_ids) for o in outs) / sec

    for name, soft, radix in (("hard", modes["hard"], True), ("soft", modes["soft"], True),
                              ("soft, radix cache off", modes["soft"], False)):
        log = tmp / f"batches-{len(prefill)}.jsonl"
        os.environ[BATCH_LOG] = str(log)
        eng = SGLangEngine(path, soft, server_args=dict(CPU_ARGS, disable_radix_cache=not radix))
        try:
            eng.eos_ids = []  # fixed-length decoding (SGLang ignores eos)
            eng.generate(ps[:1], soft=soft, sampling=warm)
            eng.backend.flush_cache()
            log.unlink(missing_ok=True)
            sec, outs = timed(lambda: eng.generate(ps, soft=soft, sampling=sampling, n=a.n,
                                                   seed=0), a.repeats)
            if "off" not in name:
                tps[f"sglang {name}"] = sum(len(o.token_ids) for o in outs) / sec
            if name != "hard":
                eng.backend.flush_cache()
                log.unlink(missing_ok=True)
                eng.generate(ps, soft=soft, sampling=SamplingConfig(max_new_tokens=1), n=a.n,
                             seed=0)
                prefill["on" if radix else "off"] = prefill_per_group(log, a.n)
        finally:
            eng.close()
        os.environ.pop(BATCH_LOG, None)

    print(f"\ndecode throughput, {a.prompts} image prompts × G={a.n}, {a.steps} steps, vocab "
          f"{a.vocab}, {os.cpu_count()} CPUs (tokens/s):")
    for k, v in tps.items():
        print(f"  {k:<12} {v:9.1f}")
    print("ratios:")
    for num, den in (("sglang soft", "sglang hard"), ("sglang soft", "local soft"),
                     ("sglang hard", "local hard"), ("local soft", "local hard")):
        print(f"  {num} / {den}: {tps[num] / tps[den]:.2f}")
    print(f"\nprefill tokens per prompt group (G={a.n}):")
    for k in ("on", "off"):
        print(f"  radix cache {k:<3}: {prefill[k]}")
    print(f"  off / on: {sum(prefill['off']) / sum(prefill['on']):.2f}")


if __name__ == "__main__":
    main()
