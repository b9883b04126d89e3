"""Time and peak memory of `alignment_scores` against the naive per-step outer products.

    python scripts/bench_alignment.py            # default size grid (long: the naive method)
    python scripts/bench_alignment.py --quick    # small grid (V up to 64000)
    python scripts/bench_alignment.py --quick --repeats 7 --min-seconds 0.5
    python scripts/bench_alignment.py --quick --threads 1   # a shared machine: one torch thread

Time: per size one subprocess holds the inputs and measures both methods in turns whose order
rotates every repeat (`soft_spatial_bench.workloads.interleaved`), one measurement being the mean of as many
consecutive calls as fill ``--min-seconds``, after those calls were counted (a warm-up). Printed
per size: min, median and spread ((max - min) / median) of the seconds per method and the time
ratios naive/ours of the minima, of the medians and paired per turn. Peak memory: the exact peak
bytes of the tensors each method creates (`soft_spatial_bench.workloads.TensorMemory`; deterministic, where
a peak resident set depends on what the allocator kept), one fresh subprocess per method and size;
the two methods' results are compared there (a mismatch is printed). The naive method builds
G_ref = Σ_s d_s v_sᵀ as a dense V×D matrix and one dense V×D outer product per optimisation step
(into one buffer it reuses: allocating 4·V·D bytes per step would time the kernel's page faults,
not the method); its time is G_ref's plus its steps' measured on at most ``--naive-steps`` steps
and scaled to N (marked `*`), because the per-step cost does not depend on N and the memory does
not either.
Setup mirrors training: the optimisation steps are soft (K-sparse d), the reference set holds 25%
as many soft steps plus a few dense discrete steps. Goal: the memory ratio naive/ours grows with
V·D (printed at the largest size the naive method ran). ``--threads`` sets torch's threads in
every subprocess (0: torch's default); on a shared machine one thread reproduces better, since a
multi-threaded region waits at each barrier for a thread whose core another job holds.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys

GRID = [  # (V, D, N optimisation steps)
    (1_000, 64, 256),
    (32_000, 256, 1_024),
    (151_936, 512, 2_048),
    (151_936, 1_024, 4_096),
    (151_936, 4_096, 8_192),
    (151_936, 4_096, 32_768),
]
# The naive method's working set (G_ref and one outer product, 8·V·D bytes) fits in each core's L2
# at the first size and exceeds a 32 MiB shared L3 at the others: a size in between measures how
# much of the L3 other jobs on the machine hold (V=8000, D=128 moved ±13% between runs).
QUICK = [(1_000, 64, 256), (32_000, 256, 1_024), (64_000, 256, 2_048)]

from soft_spatial_bench.workloads import alignment_inputs, naive_gref, naive_steps  # noqa: E402


def _naive(d_opt, v_opt, d_ref, v_ref, v, steps, device="cpu"):
    return naive_steps(d_opt, v_opt, naive_gref(d_ref, v_ref, v, device), steps)


def _memory(method: str, v: int, d: int, n: int, naive_steps: int) -> dict:
    """Peak bytes (MiB) of the tensors one call of ``method`` creates, and a checksum."""
    from soft_spatial_bench.workloads import TensorMemory
    from soft_spatial.softthink import alignment_scores
    args = alignment_inputs(v, d, n)
    steps = n if method == "ours" else min(n, naive_steps)
    with TensorMemory() as mem:
        out = alignment_scores(*args) if method == "ours" else _naive(*args, v, steps)
    return {"peak_mib": mem.peak / 2**20, "checksum": float(out[: min(steps, 16)].double().sum())}


def _time(v: int, d: int, n: int, naive_steps: int, repeats: int, min_seconds: float) -> dict:
    """Seconds per method, the methods interleaved across repeats; the naive method's G_ref once
    plus its steps scaled to N."""
    from soft_spatial_bench.workloads import calls_for, interleaved, mean_seconds
    from soft_spatial.softthink import alignment_scores
    d_opt, v_opt, d_ref, v_ref = args = alignment_inputs(v, d, n)
    steps = min(n, naive_steps)
    g_ref = naive_gref(d_ref, v_ref, v)
    work = {"ours": lambda: alignment_scores(*args), "G_ref": lambda: naive_gref(d_ref, v_ref, v),
            "steps": lambda: naive_steps(d_opt, v_opt, g_ref, steps)}
    calls = {m: calls_for(fn, min_seconds) for m, fn in work.items()}

    def measure(method, _):
        if method == "ours":
            return mean_seconds(work["ours"], calls["ours"])
        return (mean_seconds(work["G_ref"], calls["G_ref"])
                + mean_seconds(work["steps"], calls["steps"]) * n / steps)

    timings = interleaved(measure, ["ours", "naive"], repeats)
    return {"seconds": {m: t.seconds for m, t in timings.items()}, "scaled": steps < n}


def _run_child(kind, *args):
    cmd = [sys.executable, __file__, "--child", kind, *map(str, args)]
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        return {"error": (res.stderr.strip().splitlines() or ["killed"])[-1]}
    return json.loads(res.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="small grid")
    ap.add_argument("--naive-steps", type=int, default=16)
    ap.add_argument("--naive-max-bytes", type=float, default=8e9,
                    help="skip the naive method when 2·V·D·4 bytes exceed this")
    ap.add_argument("--repeats", type=int, default=5, help="turns of the two methods per size")
    ap.add_argument("--min-seconds", type=float, default=0.2,
                    help="least time of one measurement (consecutive calls)")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0 = default)")
    ap.add_argument("--child", nargs=8, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        kind, v, d, n, ns, reps, min_s, threads = a.child
        v, d, n, ns = int(v), int(d), int(n), int(ns)
        if int(threads):
            import torch
            torch.set_num_threads(int(threads))
        out = (_time(v, d, n, ns, int(reps), float(min_s)) if kind == "time"
               else _memory(kind, v, d, n, ns))
        print(json.dumps(out))
        return
    from soft_spatial_bench.workloads import Timing, ratio_lines

    grid = QUICK if a.quick else GRID
    print(f"{a.repeats} interleaved turns per size, each measurement ≥ {a.min_seconds:g} s of "
          f"calls, torch threads {a.threads or 'default'}")
    largest = None
    for v, d, n in grid:
        child = (v, d, n, a.naive_steps, a.repeats, a.min_seconds, a.threads)
        print(f"\nV={v} D={d} N={n}")
        ours = _run_child("ours", *child)
        if "error" in ours:
            print(f"  ours failed: {ours['error']}")
            continue
        if 2 * v * d * 4 > a.naive_max_bytes:
            print(f"  ours peak {ours['peak_mib']:.1f} MiB; naive skipped (too large)")
            continue
        naive = _run_child("naive", *child)
        timed = _run_child("time", *child)
        if "error" in naive or "error" in timed:
            print(f"  naive failed: {naive.get('error') or timed.get('error')}")
            continue
        if abs(ours["checksum"] - naive["checksum"]) > 1e-3 * (1 + abs(naive["checksum"])):
            print(f"  mismatch: ours {ours['checksum']} vs naive {naive['checksum']}")
        timings = {m + ("*" if m == "naive" and timed["scaled"] else ""): Timing(s)
                   for m, s in timed["seconds"].items()}
        print("\n".join("  " + line for line in ratio_lines(timings, "ours")))
        m_ratio = naive["peak_mib"] / max(ours["peak_mib"], 1e-3)
        print(f"  peak MiB: ours {ours['peak_mib']:.1f}, naive {naive['peak_mib']:.1f} "
              f"(naive/ours {m_ratio:.1f}x)")
        largest = (v, d, n, m_ratio)
    if largest:
        v, d, n, r = largest
        print(f"\nmemory ratio naive/ours at the largest size the naive method ran "
              f"(V={v}, D={d}, N={n}): {r:.1f}x")
    print("* naive time: G_ref once plus its steps measured on a subset and scaled to N (per-step "
          "cost is constant)")


if __name__ == "__main__":
    main()
