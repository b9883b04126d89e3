"""Fig. 4: one chain of thought (the spine text) shaded by τ per token, with τ per step beneath.

An HTML page: each spine token is a span whose background goes from blue (low τ: a sharp mixture,
close to one token) to red (high τ: a soft mixture), with the step, τ and Ĥ in its tooltip;
discrete steps (after ``</think>``) are grey. Beneath it a PNG (embedded) of τ and Ĥ per step.
"""
from __future__ import annotations

import base64
import html
import io
from collections.abc import Sequence

import numpy as np

from soft_spatial.lab.paper.analysis.data import Trace
from soft_spatial.lab.paper.analysis.plotting import pyplot

__all__ = ["pick_trace", "token_pieces", "trace_page"]


def pick_trace(traces: Sequence[Trace], key: str | None = None, min_steps: int = 5) -> Trace:
    """The trace ``benchmark:question_index:sample`` if given, else the correct trace (any trace
    if none is correct) whose soft length is the median among those with ≥ ``min_steps``."""
    if key:
        parts = key.split(":")
        if len(parts) != 3:
            raise ValueError(f"--sample must be benchmark:question_index:sample, got {key!r}")
        for t in traces:
            if (t.benchmark, str(t.question_index), str(t.sample)) == tuple(parts):
                return t
        raise ValueError(f"no sample {key!r} in the evaluation")
    pool = [t for t in traces if t.soft.sum() >= min_steps]
    if not pool:
        raise ValueError(f"no trace has {min_steps} soft steps")
    good = [t for t in pool if t.correct] or pool
    good = sorted(good, key=lambda t: (int(t.soft.sum()), t.benchmark, t.question_index,
                                       t.sample))
    return good[len(good) // 2]


def token_pieces(tokenizer, tokens: Sequence[int], window: int = 8) -> list[str]:
    """The text each token adds (decoding a short window before it, so multi-token characters
    and leading spaces come out right); the pieces concatenate to the decoded text."""
    tokens = [int(t) for t in tokens]
    pieces = []
    for i in range(len(tokens)):
        ctx = tokens[max(0, i - window):i]
        before = tokenizer.decode(ctx) if ctx else ""
        pieces.append(tokenizer.decode(ctx + [tokens[i]])[len(before):])
    return pieces


def _colour(x: float) -> str:
    import matplotlib

    r, g, b, _ = matplotlib.colormaps["coolwarm"](x)
    return f"rgba({int(255 * r)},{int(255 * g)},{int(255 * b)},0.55)"


def _plot_png(t: Trace) -> str:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(9, 2.6))
    steps = np.arange(t.tau.size)
    soft = t.soft
    ax.plot(steps[soft], t.tau[soft], color="#c44e52", lw=1.2, label="τ")
    ax.set_xlabel("step")
    ax.set_ylabel("τ", color="#c44e52")
    ax2 = ax.twinx()
    ax2.plot(steps[soft], t.entropy[soft], color="#4c72b0", lw=0.8, alpha=0.6, label="Ĥ")
    ax2.set_ylabel("normalised entropy Ĥ", color="#4c72b0")
    if (~soft).any():
        ax.axvline(int(np.argmax(~soft)), color="k", lw=0.8, ls=":", label="</think>")
    ax.set_xlim(0, max(1, t.tau.size - 1))
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def trace_page(t: Trace, pieces: Sequence[str]) -> str:
    """The HTML page of trace ``t`` whose tokens read as ``pieces``."""
    if len(pieces) != t.tau.size:
        raise ValueError(f"{len(pieces)} token pieces for {t.tau.size} steps")
    tau = t.soft_tau
    lo, hi = (float(tau.min()), float(tau.max())) if tau.size else (0.0, 1.0)
    span = max(hi - lo, 1e-9)
    out = []
    for i, piece in enumerate(pieces):
        text = html.escape(piece)
        if t.soft[i]:
            x = (float(t.tau[i]) - lo) / span
            out.append(f'<span style="background:{_colour(x)}" title="step {i}: τ = '
                       f'{t.tau[i]:.3f}, Ĥ = {t.entropy[i]:.3f}">{text}</span>')
        else:
            out.append(f'<span class="discrete" title="step {i}: discrete">{text}</span>')
    row = t.row
    legend = "".join(f'<span style="background:{_colour(x)}">&nbsp;{lo + x * span:.3f}&nbsp;</span>'
                     for x in np.linspace(0, 1, 6))
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>Fig. 4: τ along a chain of thought</title>
<style>
body {{ font-family: system-ui, sans-serif; max-width: 62em; margin: 2em auto; color: #222; }}
.trace {{ white-space: pre-wrap; font-family: ui-monospace, monospace; font-size: 13px;
          line-height: 1.8; border: 1px solid #ddd; padding: 1em; }}
.discrete {{ background: #e6e6e6; }}
.meta {{ color: #555; font-size: 14px; }}
img {{ width: 100%; margin-top: 1em; }}
</style></head><body>
<h2>Fig. 4: the spine of one chain of thought, shaded by τ</h2>
<p class="meta">{html.escape(t.benchmark)} question {t.question_index}
({html.escape(str(row.get("question_id", "")))}), sample {t.sample};
category {html.escape(str(row.get("category", "")))}
{html.escape(str(row.get("subcategory") or ""))}; answer {html.escape(str(row.get("answer")))},
predicted {html.escape(str(row.get("pred")))} ({"correct" if t.correct else "incorrect"});
{int(t.soft.sum())} soft steps of {t.tau.size}; τ from {lo:.3f} to {hi:.3f}.</p>
<p class="meta">τ: {legend} (blue: sharp mixture, red: soft mixture; grey: discrete steps after
&lt;/think&gt;). Hover a token for its step, τ and Ĥ.</p>
<div class="trace">{"".join(out)}</div>
<img alt="τ and Ĥ per step" src="data:image/png;base64,{_plot_png(t)}">
</body></html>
"""
