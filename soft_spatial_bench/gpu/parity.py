"""Step-by-step comparison of two engines' completions (the GPU kit's stage d and its drift study).

Rows are :class:`soft_spatial.engines.base.Completion` lists of the same prompts, samples and
seeds, in the same order. Per step a row has exact fields (the emitted token, the soft flag, the
candidate ids: the decoding path) and float fields (the candidate scores, τ, the step's
log-likelihood). Soft steps feed softmax(z/τ) back as the next input, so a float difference at
one step moves the next input continuously; hard steps feed a discrete token. Per-step max |Δ|
from the first step tells the two explanations of a divergence apart: amplification of
legitimate rounding grows smoothly from ~1e-6..1e-4, a bug jumps.
"""
from __future__ import annotations

import math

EXACT = ("token", "soft", "topk_ids")
FLOATS = ("scores", "tau", "loglik")
# docs/sglang.md, "Parity with the local engine": per row and field,
# max|engine − local fp64| <= ATOL + AMPLIFICATION · max|local fp32 − local fp64|
ATOL, AMPLIFICATION = 3e-3, 4.0


def step_value(c, field: str, s: int):
    """Row ``c``'s ``field`` at step ``s`` (lists for the per-candidate fields)."""
    if field == "token":
        return c.token_ids[s]
    if field == "loglik":
        return float(c.logprobs[s])
    v = getattr(c.trace, field)[s]
    return bool(v) if field == "soft" else v.tolist()


def _delta(a, b) -> float:
    a, b = (a, b) if isinstance(a, list) else ([a], [b])
    return max((abs(x - y) for x, y in zip(a, b)), default=0.0)


def _row_divergence(a, b, tol: float):
    """(step, field, value a, value b) of the first difference between rows ``a`` and ``b``
    (exact fields: any difference; float fields: |Δ| > tol), or None."""
    for s in range(min(len(a.token_ids), len(b.token_ids))):
        for f in EXACT + FLOATS:
            va, vb = step_value(a, f, s), step_value(b, f, s)
            if (va != vb) if f in EXACT else not _delta(va, vb) <= tol:  # NaN differs
                return s, f, va, vb
    if len(a.token_ids) != len(b.token_ids):
        s = min(len(a.token_ids), len(b.token_ids))
        return s, "length", len(a.token_ids), len(b.token_ids)
    return None


def first_divergence(rows_a, rows_b, tol: float = 0.0) -> dict | None:
    """The earliest step at which any row of ``rows_a`` differs from its row in ``rows_b`` (ties:
    the lowest row), as ``{"row", "step", "field", "a", "b"}``; None if none differs. Fields are
    checked in the order token, soft, topk_ids, scores, tau, loglik; float fields differ when
    some |Δ| > ``tol`` (``math.inf``: compare the decoding paths only)."""
    if len(rows_a) != len(rows_b):
        raise ValueError(f"{len(rows_a)} rows against {len(rows_b)}: not the same prompts")
    found = [(d, r) for r, (a, b) in enumerate(zip(rows_a, rows_b))
             if (d := _row_divergence(a, b, tol)) is not None]
    if not found:
        return None
    (s, f, va, vb), r = min(found, key=lambda x: (x[0][0], x[1]))
    return {"row": r, "step": s, "field": f, "a": va, "b": vb}


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.6g}"
    if isinstance(v, list):
        return "[" + ", ".join(_fmt(x) for x in v) + "]"
    return str(v)


def describe(d: dict | None, names=("a", "b")) -> str:
    """``row 3 step 5 scores: a [..], b [..]`` (or ``none``) for :func:`first_divergence`'s answer."""
    if d is None:
        return "none"
    return (f"row {d['row']} step {d['step']} {d['field']}: {names[0]} {_fmt(d['a'])}, "
            f"{names[1]} {_fmt(d['b'])}")


def per_step_deltas(rows_a, rows_b, fields=FLOATS) -> dict[str, list[float]]:
    """``{field: [max |Δ| at step 0, 1, …]}`` over the rows still on the same decoding path
    (every exact field equal up to and including that step); NaN where no row is."""
    n = max((min(len(a.token_ids), len(b.token_ids)) for a, b in zip(rows_a, rows_b)), default=0)
    out = {f: [math.nan] * n for f in fields}
    for a, b in zip(rows_a, rows_b):
        for s in range(min(len(a.token_ids), len(b.token_ids))):
            if any(step_value(a, f, s) != step_value(b, f, s) for f in EXACT):
                break  # off the path: later steps compare different candidates
            for f in fields:
                d, cur = _delta(step_value(a, f, s), step_value(b, f, s)), out[f][s]
                out[f][s] = d if math.isnan(cur) else max(cur, d)
    return out


def max_abs(a, b, field: str, upto: int | None = None) -> float:
    """max over steps ``< upto`` (default all) of |Δ field| between rows ``a`` and ``b``."""
    n = min(len(a.token_ids), len(b.token_ids), upto if upto is not None else math.inf)
    return max((_delta(step_value(a, field, s), step_value(b, field, s)) for s in range(n)),
               default=0.0)


def path_length(a, b) -> int:
    """How many steps rows ``a`` and ``b`` share their decoding path (all of them if equal)."""
    d = _row_divergence(a, b, math.inf)
    return min(len(a.token_ids), len(b.token_ids)) if d is None else d[0]


def same_path(a, b) -> bool:
    return (len(a.token_ids) == len(b.token_ids) and a.finish_reason == b.finish_reason
            and _row_divergence(a, b, math.inf) is None)


def row_verdicts(got, want, ref, fields=FLOATS) -> list[dict]:
    """Per row: ``got`` (an fp32 engine) against the local engine's fp32 ``want`` and fp64 ``ref``
    runs of the same rows. ``status``:

    * "ok": on ``ref``'s path wherever ``want`` is, and every float field within the bound
      ATOL + AMPLIFICATION · max|want − ref| (over the steps all three share);
    * "ill-conditioned": ``want`` itself leaves ``ref``'s path (fp32 rounding alone changes it),
      floats within the bound over the steps all three share; no path verdict is possible
      (``fp32_path`` and ``path``: the steps ``want`` and ``got`` share with ``ref``);
    * "path": ``want`` stays on ``ref``'s path and ``got`` leaves it;
    * "bound": a float field beyond the bound (``field``, ``dev``, ``bound``, over ``steps``).
    """
    out = []
    for g, w, x in zip(got, want, ref):
        p, q = path_length(w, x), path_length(g, x)
        cond = same_path(w, x)
        v = {"status": "ok" if cond else "ill-conditioned", "steps": min(p, q), "fp32_path": p,
             "path": q}
        if cond and not same_path(g, x):
            v["status"] = "path"
        for f in fields:
            dev = max_abs(g, x, f, v["steps"])
            bound = ATOL + AMPLIFICATION * max_abs(w, x, f, v["steps"])
            if dev > bound and v["status"] in ("ok", "ill-conditioned"):
                v.update(status="bound", field=f, dev=dev, bound=bound)
        out.append(v)
    return out


def summarize(got, want, ref) -> tuple[list[dict], dict, list, dict]:
    """(:func:`row_verdicts`, their count per status, the (got, want) pairs on the same path,
    max |Δ| per float field over those pairs: NaN without any) of an engine's rows ``got``
    against the local engine's fp32 ``want`` and fp64 ``ref``."""
    verdicts = row_verdicts(got, want, ref)
    count = {k: sum(v["status"] == k for v in verdicts)
             for k in ("ok", "ill-conditioned", "path", "bound")}
    same = [(a, b) for a, b in zip(got, want) if same_path(a, b)]
    dev = {k: max((max_abs(a, b, k) for a, b in same), default=math.nan) for k in FLOATS}
    return verdicts, count, same, dev


def curve(values: list[float], every: int = 1) -> str:
    """``1.2e-06 3.4e-06 …`` (every ``every``-th step; ``–`` where no row was on the path)."""
    return " ".join("–" if math.isnan(v) else f"{v:.1e}" for v in values[::every])


def local_runs(model_dir, device: str, confs: dict, prompts, sampling, n: int, seed: int,
               controller=None, dtypes=None) -> dict:
    """``{mode: {dtype name: rows}}``: the local (embedded) engine on ``model_dir`` in each of
    ``dtypes`` (default float32 and float64), eos ignored, same prompts, seeds and controller."""
    import torch

    from soft_spatial.engines import LocalEngine
    out = {m: {} for m in confs}
    for dtype in dtypes or (torch.float32, torch.float64):
        eng = LocalEngine.from_pretrained(model_dir, device=device, dtype=dtype,
                                          controller=controller, max_batch_rows=len(prompts) * n)
        eng.eos_ids = []  # fixed-length decoding: every run takes the same number of steps
        for m, conf in confs.items():
            out[m][str(dtype).removeprefix("torch.")] = eng.generate(
                prompts, soft_thinking=conf, sampling=sampling, n=n, seed=seed)
        del eng
    return out


def dump_completions(rows) -> list[dict]:
    """Completions as JSON-able dicts (every float exact: fp32 values are doubles in JSON)."""
    return [{"prompt_index": c.prompt_index, "sample_index": c.sample_index,
             "prompt_ids": list(c.prompt_ids), "token_ids": list(c.token_ids), "text": c.text,
             "trace": c.trace.to_lists(), "finish_reason": c.finish_reason,
             "think_end": c.think_end, "logprobs": [float(x) for x in c.logprobs]} for c in rows]


def load_completions(data: list[dict]) -> list:
    """:func:`dump_completions`' rows back as ``Completion`` objects (no pickle: nothing runs)."""
    from soft_spatial.engines.base import Completion
    from soft_spatial.softthink import SoftTrace
    return [Completion(**dict(d, trace=SoftTrace.from_lists(d["trace"]))) for d in data]
