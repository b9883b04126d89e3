"""B/softthink: ``softthink`` at real sizes (V=151,936, D=4,096, N up to 32k): exact gradient
alignment's time and peak memory against the naive per-step V×D form; Gumbel-density, replay and
per-step likelihood throughput. A dry run: V=1000, D=64, N=256 on the CPU."""
from __future__ import annotations

from dataclasses import dataclass

from soft_spatial.bench.workloads import ALIGN_DENSE, ALIGN_K, alignment_inputs, naive_gref, naive_steps
from soft_spatial.bench.gpu.context import KitContext, free_memory
from soft_spatial.bench.gpu.measure import PeakMemory, timed
from soft_spatial.bench.gpu.report import table

__all__ = ["SoftthinkResult", "measure", "render"]

ALIGNMENT = ["N", "ours ms", "ours MiB", "naive s (scaled)", "naive MiB", "time ×", "memory ×",
             "rel. err (first steps)"]
OPS = ["operation (forward + backward)", "size", "ms", "rows/s", "peak extra MiB"]


@dataclass
class SoftthinkResult:
    """B/softthink's result: a row of :data:`ALIGNMENT` per N (the naive form timed on
    ``naive_steps`` and scaled), a row of :data:`OPS` per operation."""

    vocab: int
    hidden: int
    naive_steps: int
    alignment: list
    ops: list


def measure(ctx: KitContext, job) -> SoftthinkResult:
    dev = ctx.device
    if ctx.dry_run:
        v, d, sizes, n_naive = 1000, 64, [256], 4
    else:
        v, d, sizes, n_naive = 151_936, 4096, [2048, 8192, 32_768], 8
    rows = []
    for n in sizes:
        rows.append(_alignment_row(dev, v, d, n, n_naive))
        free_memory()  # the row's tensors died with its frame
    ops = _softthink_ops(ctx, v, d)
    free_memory()
    return SoftthinkResult(v, d, n_naive, rows, ops)


def render(r: SoftthinkResult) -> list[str]:
    return [f"Exact gradient alignment (`alignment_scores`, fp32) against the naive form (dense "
            f"G_ref once, then one V×D outer product per step, timed on {r.naive_steps} steps and "
            f"scaled to N): V={r.vocab}, D={r.hidden}, K={ALIGN_K}, 25% reference steps plus "
            f"{ALIGN_DENSE} dense ones.", "", *table(ALIGNMENT, r.alignment), "",
            *table(OPS, r.ops)]


def _alignment_row(dev: str, v: int, d: int, n: int, n_naive: int) -> list:
    """One row of the alignment table: ours against the naive form at N = ``n`` steps."""
    import torch

    from soft_spatial.softthink import alignment_scores

    args = [x.to(dev) if isinstance(x, torch.Tensor) else x for x in alignment_inputs(v, d, n, device=dev)]
    with PeakMemory(dev) as mem:
        t_ours, _, alpha = timed(lambda: alignment_scores(*args), dev, repeats=3)
    with PeakMemory(dev) as mem_n:  # G_ref once, its steps timed on a few and scaled to N
        t_gref, _, g_ref = timed(lambda: naive_gref(args[2], args[3], v, device=dev), dev,
                                 repeats=1, warmup=0)
        t_steps, _, ref = timed(lambda: naive_steps(args[0], args[1], g_ref, n_naive),
                                dev, repeats=1, warmup=0)
    err = float((alpha[:n_naive] - ref).norm() / ref.norm().clamp(min=1e-30))
    t_naive_n = t_gref + t_steps * n / n_naive
    return [n, round(t_ours * 1e3, 2), round(mem.mib, 1), round(t_naive_n, 2),
            round(mem_n.mib, 1), round(t_naive_n / t_ours, 1),
            round(mem_n.mib / max(mem.mib, 1e-3), 1), f"{err:.1e}"]


def _softthink_ops(ctx: KitContext, v: int, d: int) -> list[list]:
    """Rows of :data:`OPS`: density, replay and the per-step likelihood from logits."""
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
    return [["Gumbel log-density (eq. 5)", f"{big}×{k}", round(t_dens * 1e3, 3),
             f"{big / t_dens:.3g}", "–"],
            [f"replay embeddings (E {dtype} {v}×{d})", f"{nrec}×{k}", round(t_rep * 1e3, 3),
             f"{nrec / t_rep:.3g}", round(mem_r.mib, 1)],
            [f"per-step likelihood from {dtype} logits", f"{nlog}×{v}", round(t_ll * 1e3, 3),
             f"{nlog / t_ll:.3g}", round(mem_l.mib, 1)]]
