"""The warm start's views of a path question (docs/learning.md, "Ambiguous-start path tracking").

A path record (``soft_spatial.data.synthetic``'s ``path_*`` tasks) carries its m candidate
trajectories (``branches``), the true one (``true_branch``) and the step t* at which it enters the
purple circle. The warm start trains it in up to two views (CoT2's CSFT, the design's ``W-mix``):

* **hard view** — teacher forcing on one trajectory with one-hot inputs. The trajectory is the
  true one with probability 1/m, else a wrong one (drawn once per record and seed: the rate of an
  on-policy hard guess); a wrong trace has no ``circle`` word, ends with its own cell and quarter,
  and its letter carries no loss (it teaches tracking and that a path may miss the circle, never a
  wrong answer). The first position word gets a soft label, uniform over the m cells after the
  first move: which start is the robot's is not predictable there.
* **soft view** — the true trace, where each position word of steps 1..t* is fed as a mixture of
  the *live* cells (the m trajectories' cells after that move, a function of the prompt only) and
  K − |live| distractor cells, weighted exactly as a rollout weighs its candidates
  (w = softmax((log p̃ + c·γ)/τ), τ drawn per sequence from the controller's range; the noise is
  drawn at batch time, :func:`draw_mixture_scores`), with a target uniform over the live cells
  whatever the weights (re-equalisation). The word after the collapse step is ``circle``; after it
  the inputs and targets are the true path's, one-hot.
* **no chain** — the answer alone, ``<think>\\n\\n</think>\\n\\n{letter}`` (the necessity control).

Everything here builds token positions and candidate distributions; the mixture itself is
computed by :func:`soft_spatial.softthink.replay.soft_inputs` (the one place it lives) inside
:func:`soft_spatial.lab.learning.warmstart.response_loss`.
"""
from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from soft_spatial.data.record import QuestionRecord, index_to_letter
from soft_spatial.data.synthetic import PATH_TASKS, QUARTERS, cell_name
from soft_spatial.lab.learning.config import VIEWS
from soft_spatial.softthink.config import AdaptSoftConfig, SoftThinkingConfig
from soft_spatial.softthink.mixture import gumbel_from_uniform, perturb

__all__ = ["VIEWS", "PathTruth", "Target", "trace_words", "word_positions", "hard_trace",
           "live_cells", "soft_view_targets", "draw_mixture_scores", "is_path_record"]

@dataclass(frozen=True)
class PathTruth:
    """What a path record says about its trajectories (from its ``data.json`` row)."""

    moves: tuple[str, ...]
    branches: tuple[tuple[str, ...], ...]  # per candidate start: the cell after every move
    true_branch: int
    t_star: int
    grid: int

    @classmethod
    def from_row(cls, row: dict, where: str = "") -> "PathTruth":
        try:
            truth = cls(tuple(row["moves"]), tuple(tuple(b["cells"]) for b in row["branches"]),
                        int(row["true_branch"]), int(row["t_star"]), int(row["grid"]))
        except (KeyError, TypeError) as e:
            raise ValueError(f"{where}: record {row.get('id')!r} is a path question without its "
                             f"field {e} (moves, branches, true_branch, t_star, grid)") from None
        if not (0 <= truth.true_branch < len(truth.branches)
                and 1 <= truth.t_star <= len(truth.moves)
                and all(len(b) == len(truth.moves) for b in truth.branches)):
            raise ValueError(f"{where}: record {row.get('id')!r}: inconsistent path fields "
                             f"(true_branch {truth.true_branch} of {len(truth.branches)}, t_star "
                             f"{truth.t_star}, {len(truth.moves)} moves)")
        return truth

    @property
    def m(self) -> int:
        return len(self.branches)

    def quarter(self, branch: int) -> int:
        """The quarter index (``QUARTERS``) of ``branch``'s last cell."""
        name = self.branches[branch][-1]
        x, y = ord(name[0]) - ord("a"), int(name[1:]) - 1
        half = self.grid // 2
        return 2 * (y >= half) + (x >= half)


def is_path_record(record: QuestionRecord, row: dict) -> bool:
    return row.get("synthetic_task") in PATH_TASKS


def trace_words(truth: PathTruth, branch: int) -> list[str]:
    """The reasoning words of ``branch``'s trace: ``move cell`` per move, ``circle`` after step
    t* on the true branch only, then ``: <last cell> <quarter>`` (the generator's format)."""
    words: list[str] = []
    for s, (move, cell) in enumerate(zip(truth.moves, truth.branches[branch]), 1):
        words += [move, cell] + (["circle"] if branch == truth.true_branch and s == truth.t_star
                                 else [])
    return words + [":", truth.branches[branch][-1], QUARTERS[truth.quarter(branch)]]


def hard_trace(truth: PathTruth, seed: int, record_id: str) -> tuple[int, str, str]:
    """``(branch, reasoning, letter)`` of the record's hard-view trace: the branch is uniform over
    the m candidates (drawn from ``seed`` and the id, the same in every run); the letter is the
    quarter's of that branch (carrying no loss unless it is the true one)."""
    branch = random.Random(f"{seed}:{record_id}:branch").randrange(truth.m)
    return branch, " ".join(trace_words(truth, branch)), index_to_letter(truth.quarter(branch))


def word_positions(tokenizer, ids: Sequence[int], start: int, words: Sequence[str],
                   where: str) -> list[int]:
    """The position of each reasoning word in ``ids`` (the response starts at ``start``): every
    word must be one token, in order (the path tasks' BPE holds cells, moves and quarters whole)."""
    out = []
    for j, word in enumerate(words):
        p = start + j
        got = tokenizer.decode([ids[p]]).strip() if p < len(ids) else None
        if got != word:
            raise ValueError(f"{where}: reasoning word {j} {word!r} is not one token (found "
                             f"{got!r}): build the model's tokenizer with "
                             f"synthetic.corpus(tasks=[...path tasks])")
        out.append(p)
    return out


def live_cells(truth: PathTruth, step: int) -> list[str]:
    """The cells the m trajectories occupy after move ``step`` (1-based), distinct up to t*."""
    return [b[step - 1] for b in truth.branches]


@dataclass(frozen=True)
class Target:
    """A soft target or mixture input at one sequence position: candidate token ids and, for a
    target, their probabilities; for an input, their log p̃ (what a rollout's top-K would hold)."""

    position: int
    ids: tuple[int, ...]
    values: tuple[float, ...]


def _cell_id(tokenizer, cell: str) -> int:
    ids = tokenizer.encode(" " + cell, add_special_tokens=False)
    if len(ids) != 1:
        raise ValueError(f"cell {cell!r} is not one token after a space ({ids}): build the "
                         f"model's tokenizer with synthetic.corpus(tasks=[...path tasks])")
    return ids[0]


def soft_view_targets(tokenizer, truth: PathTruth, positions: Sequence[int], seed: int,
                      record_id: str, distractor_mass: float,
                      k: int = SoftThinkingConfig.top_k) -> tuple[list[Target], list[Target]]:
    """``(targets, inputs)`` of the soft view over the true trace whose word positions are
    ``positions`` (:func:`word_positions`): at the position word of each step s ≤ t*, a target
    uniform over the live cells and a mixture input over them plus ``k − |live|`` distractor cells
    (drawn from the record and ``seed``), log p̃ = log((1 − ε)/|live|) for live cells and
    log(ε/(k − |live|)) for distractors, ε = ``distractor_mass``."""
    if truth.m > k:
        raise ValueError(f"record {record_id!r}: {truth.m} candidate starts but K = {k}")
    rng = random.Random(f"{seed}:{record_id}:distractors")
    cells = [cell_name((x, y)) for y in range(truth.grid) for x in range(truth.grid)]
    targets, inputs = [], []
    for s in range(1, truth.t_star + 1):
        pos = positions[2 * s - 1]  # words: move_1 cell_1 move_2 cell_2 ... (circle after t*)
        live = live_cells(truth, s)
        if len(set(live)) != len(live):
            raise ValueError(f"record {record_id!r}: candidate paths meet at step {s} <= t*")
        live_ids = tuple(_cell_id(tokenizer, c) for c in live)
        targets.append(Target(pos, live_ids, tuple(1.0 / len(live) for _ in live)))
        extra = rng.sample([c for c in cells if c not in live], k - len(live))
        ids = live_ids + tuple(_cell_id(tokenizer, c) for c in extra)
        n_extra = len(extra)
        logp = tuple([math.log((1 - distractor_mass) / len(live))] * len(live)
                     + [math.log(distractor_mass / n_extra)] * n_extra) if n_extra else tuple(
                         [math.log(1.0 / len(live))] * len(live))
        inputs.append(Target(pos, ids, logp))
    return targets, inputs


def draw_mixture_scores(logp: Tensor, rows: Tensor, num_rows: int, generator: torch.Generator,
                        noise_scale: float = SoftThinkingConfig.noise_scale,
                        tau_range: tuple[float, float] | None = None) -> tuple[Tensor, Tensor]:
    """Perturbed scores z = log p̃ + c·γ (γ standard Gumbel, ``[N, K]``) and one τ per sequence
    drawn uniformly from ``tau_range`` (default the controller's [τ₀ − Δ, τ₀ + Δ]), returned per
    mixture position (``[N]``; ``rows`` maps each position to its sequence)."""
    if tau_range is None:
        a = AdaptSoftConfig()
        tau_range = (a.tau0 - a.delta, a.tau0 + a.delta)
    lo, hi = tau_range
    u = torch.rand(logp.shape, generator=generator, dtype=torch.float64).to(logp.dtype)
    z = perturb(logp, noise_scale, gumbel_from_uniform(u))
    tau_rows = lo + (hi - lo) * torch.rand(num_rows, generator=generator, dtype=torch.float64)
    return z, tau_rows.to(logp.dtype)[rows]
