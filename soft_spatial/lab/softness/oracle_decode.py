"""Decoding a path question with oracle inputs at its branch steps: can the model *read* a
superposition? (The softness experiment's Stage 0 and its reading diagnostic, docs/learning.md,
"Stage 0, registered before it runs", and docs/results/softness.md, "The reading diagnostic".)

The loop decodes one prompt's ``n`` samples as :class:`~soft_spatial.engines.local.LocalEngine`
does (the engine's public pieces: its model, embedding and banned ids, :func:`sample_step`, the
row seeds and counter-based uniforms of :mod:`soft_spatial.softthink.noise`, the records' mixture
inputs), so without an oracle it draws the same samples as ``engine.generate`` on that prompt
alone (tests/lab/softness/test_oracle_decode.py). With an oracle, the input after every **branch step** —
a position word of a step s ≤ t*, counted along the sample's own chain as
:func:`soft_spatial.lab.softness.branches.step_types` counts it, while the think block is open — is
replaced, in every decoding mode: in a soft mode (Stage 0) every other thinking step is the
model's own mixture, in ``hard`` mode (the reading diagnostic) every other step is the one-hot
token sampled exactly as ``python -m soft_spatial.eval mode=hard`` samples it:

* ``mixture``: the true live mixture, built as the warm start's soft view builds it
  (:func:`soft_spatial.lab.learning.path_views.soft_view_targets`: the m live cells after move s and
  K − m distractor cells, log p̃ = log((1 − ε)/m) and log(ε/(K − m))), perturbed with the Gumbel
  noise the rollout drew at that step (its first K uniforms) and weighted at the rollout's τ
  (a hard step has none: :attr:`OracleSpec.hard_tau`, Stage 0's fixed 0.9):
  w = softmax((log p̃ + c·γ)/τ), input Σ w_k E[c_k];
* ``guess``: the one-hot input of one live cell, of one start drawn per sample for the whole
  chain (a hard chain given perfect tracking up to t*: the control that separates reading a
  superposition from the tracking the oracle hands over);
* ``none``: nothing replaced (the plain decode).

The emitted (spine) tokens stay the model's own; every other step is free-running. At each
thinking branch step the model's *own* distribution is read out (a soft step: its mixture, what it
would have fed; a hard step: its next-token probabilities at the sampling temperature): its weight
on the live cells, on the true cell, on the cross cells (sharing a column with one live cell and a
row with another: what an additive column + row code cannot tell from the live pair) and, their
fair null, on the other cells of a live cell's row or column.
"""
from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor

from soft_spatial.engines.base import think_end_token
from soft_spatial.engines.prompts import render_chat
from soft_spatial.engines.step import sample_step
from soft_spatial.lab.softness.branches import step_types
from soft_spatial.lab.learning.path_views import PathTruth, soft_view_targets
from soft_spatial.lab.learning.warmstart import WarmStartConfig
from soft_spatial.models.rope import decode_position_ids, prefill_position_ids
from soft_spatial.models.tokens import single_token_id
from soft_spatial.softthink import SamplingConfig, SoftThinkingConfig, record_input_embeddings
from soft_spatial.softthink.mixture import (gumbel_from_uniform, mixture_weights, perturb,
                                            record_weights, soft_embedding)
from soft_spatial.softthink.noise import noise_uniforms, row_seed, seed_tensor

__all__ = ["ORACLES", "OracleSpec", "Decoded", "BranchReadout", "cross_cells", "line_cells",
           "oracle_plan", "decode"]

#: what the input after a branch step becomes (module docstring)
ORACLES = ("none", "mixture", "guess")


@dataclass(frozen=True)
class OracleSpec:
    """Which oracle, and how its mixtures are built (the warm start's soft view: its ``seed``
    draws the distractor cells, ``distractor_mass`` is ε)."""

    kind: str = "mixture"
    seed: int = 0
    distractor_mass: float = WarmStartConfig.distractor_mass
    hard_tau: float = 0.9
    """τ of the mixture fed at a hard (one-hot) step, which draws no τ of its own: Stage 0's fixed
    τ, so the mixture is the one Stage 0 fed at that step (a soft step uses the rollout's τ)."""

    def __post_init__(self):
        if self.kind not in ORACLES:
            raise ValueError(f"oracle must be one of {ORACLES}, got {self.kind!r}")
        if not 0 < self.distractor_mass < 1:
            raise ValueError(f"distractor_mass must be in (0, 1), got {self.distractor_mass}")
        if not self.hard_tau > 0:
            raise ValueError(f"hard_tau must be > 0, got {self.hard_tau}")


@dataclass(frozen=True)
class BranchReadout:
    """The model's own distribution at one thinking branch step (before any replacement): a soft
    step's mixture weights, a hard step's next-token probabilities."""

    step: int
    """s, the move the position word follows."""
    live_mass: float
    true_weight: float
    cross_mass: float
    cell_mass: float
    """Weight on any cell of the board."""
    n_cross: int
    """How many cross cells there are at this step."""
    replaced: bool
    line_mass: float = 0.0
    """Weight on the other cells of a live cell's column or row (:func:`line_cells`)."""
    n_line: int = 0


@dataclass
class Decoded:
    """One sample."""

    sample: int
    token_ids: list[int]
    text: str
    think_closed: bool
    finish: str
    branch: int | None = None
    """The ``guess`` oracle's start (None otherwise)."""
    readouts: list[BranchReadout] = field(default_factory=list)
    logits: list[Tensor] = field(default_factory=list)
    """With ``debug``: each step's logits (the step's distribution), ``[V]``."""
    inputs: list[Tensor] = field(default_factory=list)
    """With ``debug``: the input fed after each step but the last, ``[D]``."""


def _cell(name: str) -> tuple[int, int]:
    return "abcdefgh".index(name[0]), int(name[1:]) - 1


def cross_cells(live: Sequence[str]) -> list[str]:
    """Cells sharing a column with one live cell and a row with another (not live themselves):
    with an additive code E[cell] ≈ col + row, the pair {(c1, r1), (c2, r2)} and {(c1, r2),
    (c2, r1)} mix to the same input."""
    cells = [_cell(c) for c in live]
    out = []
    for i, (x, _) in enumerate(cells):
        for j, (_, y) in enumerate(cells):
            name = f"{'abcdefgh'[x]}{y + 1}"
            if i != j and (x, y) not in cells and name not in out:
                out.append(name)
    return out


def line_cells(live: Sequence[str], grid: int = 6) -> list[str]:
    """The cross cells' fair null: the cells sharing a column or a row with a live cell that are
    neither live nor cross cells (an error along one axis lands here as often as on a cross
    cell, a code that cannot bind lands on the cross cells more)."""
    cells = {_cell(c) for c in live}
    cross = {_cell(c) for c in cross_cells(live)}
    cols, rows = {x for x, _ in cells}, {y for _, y in cells}
    return [f"{'abcdefgh'[x]}{y + 1}" for y in range(grid) for x in range(grid)
            if (x in cols or y in rows) and (x, y) not in cells | cross]


def oracle_plan(tokenizer, row: Mapping, spec: OracleSpec, k: int) -> dict[int, tuple[Tensor, Tensor]]:
    """``{s: (ids [K], log p̃ [K])}`` of the live mixture after move s, s = 1..t*, as the warm
    start's soft view builds it for this record."""
    truth = PathTruth.from_row(dict(row))
    positions = list(range(2 * truth.t_star + 1))  # soft_view_targets reads positions[2s - 1]
    _, inputs = soft_view_targets(tokenizer, truth, positions, spec.seed, row["id"],
                                  spec.distractor_mass, k)
    return {s: (torch.tensor(t.ids), torch.tensor(t.values, dtype=torch.float64))
            for s, t in enumerate(inputs, 1)}


def _ids_of(tokenizer, cells: Sequence[str]) -> list[int]:
    return [single_token_id(tokenizer, " " + c) for c in cells]


@torch.no_grad()
def decode(engine, messages, row: Mapping, soft_thinking: SoftThinkingConfig,
           sampling: SamplingConfig, n: int, seed: int, oracle: OracleSpec = OracleSpec("none"),
           branch_step: Callable[[list[str], int], int | None] | None = None,
           debug: bool = False) -> list[Decoded]:
    """``n`` samples of one path question (``messages``: its chat, ``row``: its ``data.json``
    row) on ``engine`` (a :class:`~soft_spatial.engines.local.LocalEngine`), sample j seeded with
    ``row_seed(seed, j)`` as ``engine.generate(..., seeds=[seed])`` seeds it.

    ``branch_step(words, t*)``: the s whose branch step the last word is, or None (default: the
    position words of steps s ≤ t*, :func:`~soft_spatial.lab.softness.branches.step_types`). ``debug``
    keeps each sample's logits and inputs (:class:`Decoded`)."""
    branch_step = branch_step or _branch_step
    tok, dev, k = engine.tokenizer, engine.device, soft_thinking.top_k
    truth = PathTruth.from_row(dict(row))
    plan = oracle_plan(tok, row, oracle, k) if oracle.kind != "none" else {}
    cells = _Cells.of(tok, truth)
    live_ids = cells.live
    guess = [random.Random(f"{seed}:{row['id']}:{j}:guess").randrange(truth.m) for j in range(n)]
    h, logits, cache, mask, deltas = _prefill(engine, messages, n)
    seeds = seed_tensor([row_seed(seed, j) for j in range(n)], dev)
    think_end = think_end_token(tok, soft_thinking)  # closes the think block in every mode
    thinking = torch.full((n,), soft_thinking.is_soft, dtype=torch.bool, device=dev)
    open_ = [True] * n  # the think block is open: the generation prompt ends with <think>
    samples = [Decoded(j, [], "", False, "length", guess[j] if oracle.kind == "guess" else None)
               for j in range(n)]
    words: list[list[str]] = [[] for _ in range(n)]
    live_rows = set(range(n))
    for step in range(sampling.max_new_tokens):
        u = noise_uniforms(seeds, step, k + 1)
        rec = sample_step(logits, h, u, thinking, soft_thinking, sampling, None, engine.feature_dim)
        nxt = record_input_embeddings(engine.embed.weight, rec.topk_ids, rec.scores,
                                      rec.tau, rec.soft)
        own = record_weights(rec.scores, rec.tau, rec.soft)
        active = sorted(live_rows)
        for j in active:
            token = int(rec.topk_ids[j, 0])
            samples[j].token_ids.append(token)
            words[j].append(tok.decode([token]).strip())
            s = branch_step(words[j], truth.t_star)
            soft_j = bool(rec.soft[j])  # in a soft mode: exactly the open think block's steps
            if s is not None and open_[j] and s in live_ids:
                if soft_j:  # the mixture's weights on its K candidates
                    weight = dict(zip(rec.topk_ids[j].tolist(), own[j].tolist()))
                else:  # the next-token probabilities at T (before the top-k filter)
                    probs = torch.softmax(logits[j].double() / sampling.temperature, -1).tolist()
                    weight = dict(enumerate(probs))
                samples[j].readouts.append(cells.readout(s, weight, truth, oracle.kind != "none"))
                if oracle.kind == "mixture":
                    tau = float(rec.tau[j]) if soft_j else oracle.hard_tau
                    nxt[j] = _oracle_mixture(engine, plan[s], u[j, :k], soft_thinking, tau)
                elif oracle.kind == "guess":
                    nxt[j] = engine.embed.weight[live_ids[s][guess[j]]]
            if think_end is not None and open_[j] and token == think_end:
                samples[j].think_closed = True
                open_[j] = False
                thinking[j] = False
            if token in engine.eos_ids:
                samples[j].finish = "stop"
                live_rows.discard(j)
        if debug:
            for j in active:
                samples[j].logits.append(logits[j].clone())
        if not live_rows or step + 1 == sampling.max_new_tokens:
            break
        if debug:
            for j in live_rows:
                samples[j].inputs.append(nxt[j].clone())
        # finished rows keep decoding (ignored): a row's noise depends on its seed and step only
        mask = torch.cat([mask, mask.new_ones(n, 1)], dim=1)
        pos = decode_position_ids(mask, deltas, engine.mrope)
        out = engine.base(inputs_embeds=nxt[:, None].to(engine.dtype), attention_mask=mask,
                          position_ids=pos, past_key_values=cache, use_cache=True)
        h, logits = _outputs(engine, out)
        cache = out.past_key_values
    for d in samples:
        d.text = tok.decode(d.token_ids, skip_special_tokens=True)
    return samples


def _prefill(engine, messages, n: int):
    """The prompt prefilled once, its cache repeated for the n samples (as the engine does):
    (hidden, logits, cache, mask, position deltas)."""
    tok, dev = engine.tokenizer, engine.device
    ids, _, mm = render_chat(messages, 0, tok, engine.processor, engine.image_token_id, engine.name)
    input_ids = torch.tensor([ids], device=dev)
    mask = torch.ones_like(input_ids)
    mm = {key: (v.to(dev, engine.dtype) if v.is_floating_point() else v.to(dev))
          for key, v in mm.items()}
    pos, deltas = prefill_position_ids(engine.model, input_ids, mask, **mm)
    out = engine.base(input_ids=input_ids, attention_mask=mask, position_ids=pos, use_cache=True,
                      **mm)
    h, logits = _outputs(engine, out)
    cache = out.past_key_values
    cache.batch_repeat_interleave(n)
    return (h.repeat_interleave(n, 0), logits.repeat_interleave(n, 0), cache,
            mask.repeat_interleave(n, 0), deltas.repeat_interleave(n, 0))


@dataclass
class _Cells:
    """The token ids of the cells a branch step's readout weighs: per step s ≤ t*, the live
    cells, their cross cells and the other cells of their rows and columns; the whole board."""

    live: dict
    cross: dict
    line: dict
    board: set

    @classmethod
    def of(cls, tok, truth) -> "_Cells":
        live = {s: [b[s - 1] for b in truth.branches] for s in range(1, truth.t_star + 1)}
        return cls({s: _ids_of(tok, c) for s, c in live.items()},
                   {s: _ids_of(tok, cross_cells(c)) for s, c in live.items()},
                   {s: _ids_of(tok, line_cells(c, truth.grid)) for s, c in live.items()},
                   set(_ids_of(tok, [f"{'abcdefgh'[x]}{y + 1}" for y in range(truth.grid)
                                     for x in range(truth.grid)])))

    def readout(self, s: int, weight: dict, truth, replaced: bool) -> "BranchReadout":
        """What the sample's own distribution (``weight``: id -> weight) put where, at branch
        step ``s``."""
        def mass(ids_):
            return float(sum(weight.get(c, 0.0) for c in ids_))

        return BranchReadout(s, mass(set(self.live[s])), mass({self.live[s][truth.true_branch]}),
                             mass(set(self.cross[s])), mass(self.board), len(self.cross[s]),
                             replaced, mass(set(self.line[s])), len(self.line[s]))


def _oracle_mixture(engine, planned, u, soft_thinking: SoftThinkingConfig, tau: float):
    """The oracle's mixture input at a branch step: its planned candidates and log-probs,
    perturbed with the step's own noise ``u [K]`` and weighted at ``tau``."""
    cand_ids, logp = planned
    gamma = gumbel_from_uniform(u.to(torch.float64), soft_thinking.noise_clamp)
    z = perturb(logp, soft_thinking.noise_scale, gamma)
    return soft_embedding(engine.embed.weight, cand_ids.to(engine.device),
                          mixture_weights(z, tau).float())


def _branch_step(words: list[str], t_star: int) -> int | None:
    kind, s = step_types(words, t_star)[-1]
    return s if kind == "branch" else None


def _outputs(engine, out) -> tuple[Tensor, Tensor]:
    """Last hidden state and logits, never-emittable ids at −inf (as the engine's step)."""
    h = out.last_hidden_state[:, -1]
    logits = engine.lm_head(h)
    if engine.banned_ids.numel():
        logits = logits.index_fill(-1, engine.banned_ids, float("-inf"))
    return h, logits
