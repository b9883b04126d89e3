"""Time and peak memory of `alignment_scores` against the naive per-step outer products.

    python scripts/bench_alignment.py            # default size grid
    python scripts/bench_alignment.py --quick    # small grid (seconds)

Each measurement runs in a fresh subprocess; peak memory is the growth of the process's maximum
resident set size over the inputs (`ru_maxrss`), so it counts every temporary. The naive method
builds G_ref = Σ_s d_s v_sᵀ as a dense V×D matrix and one V×D outer product per optimisation step;
its time is measured on at most `--naive-steps` steps and scaled to N (marked `*`), because its
per-step cost does not depend on N and its memory does not either. Setup mirrors training: the
optimisation steps are soft (K-sparse d), the reference set holds 25% as many soft steps plus a
few dense discrete steps.
"""
from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

GRID = [  # (V, D, N optimisation steps)
    (1_000, 64, 256),
    (32_000, 256, 1_024),
    (151_936, 512, 2_048),
    (151_936, 1_024, 4_096),
    (151_936, 4_096, 8_192),
    (151_936, 4_096, 32_768),
]
QUICK = [(1_000, 64, 256), (8_000, 128, 512), (32_000, 256, 1_024)]
K, N_DENSE = 5, 8


def _inputs(v, d, n, seed=0, device="cpu"):
    import torch
    from soft_spatial.softthink import SparseGrad
    g = torch.Generator().manual_seed(seed)
    n_ref = max(1, n // 4)
    d_opt = SparseGrad(torch.randint(0, v, (n, K), generator=g), torch.randn(n, K, generator=g))
    v_opt = torch.randn(n, d, generator=g)
    d_ref = [SparseGrad(torch.randint(0, v, (n_ref, K), generator=g),
                        torch.randn(n_ref, K, generator=g)),
             torch.randn(N_DENSE, v, generator=g) / v ** 0.5]
    v_ref = [torch.randn(n_ref, d, generator=g), torch.randn(N_DENSE, d, generator=g)]
    d_opt, d_ref = SparseGrad(d_opt.ids.to(device), d_opt.values.to(device)), [
        SparseGrad(d_ref[0].ids.to(device), d_ref[0].values.to(device)), d_ref[1].to(device)]
    return d_opt, v_opt.to(device), d_ref, [x.to(device) for x in v_ref]


def _naive(d_opt, v_opt, d_ref, v_ref, v, steps, device="cpu"):
    import torch
    g_ref = torch.zeros(v, v_opt.shape[1], device=device)
    for dd, vv in zip(d_ref, v_ref):
        dense = dd.to_dense(v) if not isinstance(dd, torch.Tensor) else dd
        g_ref += dense.T @ vv
    out = []
    for t in range(steps):  # one dense d_t and one V×D outer product per step
        d_t = torch.zeros(v, device=device).index_add_(0, d_opt.ids[t], d_opt.values[t])
        out.append((torch.outer(d_t, v_opt[t]) * g_ref).sum())
    return torch.stack(out)


def _measure(method: str, v: int, d: int, n: int, naive_steps: int) -> dict:
    import torch
    from soft_spatial.softthink import alignment_scores
    torch.set_num_threads(max(1, torch.get_num_threads()))
    args = _inputs(v, d, n)
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.perf_counter()
    if method == "ours":
        out = alignment_scores(*args)
        steps = n
    else:
        steps = min(n, naive_steps)
        out = _naive(*args, v, steps)
    dt = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base
    return {"time_s": dt * n / steps, "scaled": steps < n, "peak_mib": peak / 1024,
            "checksum": float(out[: min(steps, 16)].double().sum())}


def _run_child(method, v, d, n, naive_steps):
    cmd = [sys.executable, __file__, "--child", method, str(v), str(d), str(n), str(naive_steps)]
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
    ap.add_argument("--child", nargs=5, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        method, v, d, n, ns = a.child
        print(json.dumps(_measure(method, int(v), int(d), int(n), int(ns))))
        return
    grid = QUICK if a.quick else GRID
    print(f"{'V':>8} {'D':>5} {'N':>6} | {'ours s':>8} {'ours MiB':>9} | {'naive s':>9} "
          f"{'naive MiB':>9} | {'time ×':>7} {'mem ×':>7}")
    largest = None
    for v, d, n in grid:
        ours = _run_child("ours", v, d, n, a.naive_steps)
        if 2 * v * d * 4 <= a.naive_max_bytes:
            naive = _run_child("naive", v, d, n, a.naive_steps)
        else:
            naive = {"error": "skipped (too large)"}
        if "error" in ours:
            print(f"{v:>8} {d:>5} {n:>6} | ours failed: {ours['error']}")
            continue
        if "error" in naive:
            print(f"{v:>8} {d:>5} {n:>6} | {ours['time_s']:8.3f} {ours['peak_mib']:9.1f} | "
                  f"{'—':>9} {'—':>9} | naive {naive['error']}")
            continue
        if abs(ours["checksum"] - naive["checksum"]) > 1e-3 * (1 + abs(naive["checksum"])):
            print(f"  mismatch: ours {ours['checksum']} vs naive {naive['checksum']}")
        star = "*" if naive["scaled"] else " "
        t_ratio = naive["time_s"] / max(ours["time_s"], 1e-9)
        m_ratio = naive["peak_mib"] / max(ours["peak_mib"], 1e-3)
        print(f"{v:>8} {d:>5} {n:>6} | {ours['time_s']:8.3f} {ours['peak_mib']:9.1f} | "
              f"{naive['time_s']:8.2f}{star} {naive['peak_mib']:9.1f} | {t_ratio:7.1f} "
              f"{m_ratio:7.1f}")
        largest = (v, d, n, m_ratio)
    if largest:
        v, d, n, r = largest
        print(f"\nmemory ratio naive/ours at the largest size the naive method ran "
              f"(V={v}, D={d}, N={n}): {r:.1f}x")
    print("* naive time measured on a subset of steps and scaled to N (per-step cost is constant)")


if __name__ == "__main__":
    main()
