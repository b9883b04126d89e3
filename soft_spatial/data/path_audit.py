"""Audits of the path tasks (``path_known``, ``path_two``, ``path_three``): can anything but tracking
the moves name the true start or the answer?

Task v1's generator balanced a list of distance heuristics and passed every audit of its tests,
yet its true start was guessable without tracking: its rule that the true path bumps before t*
made the start whose path bumps earliest the true one on ~85% of two-start items
(docs/results/softness.md, the erratum). These audits look for that kind of leak, with
heuristics one thinks of and with learned probes that find what one did not think of. Each reads
a split's records (``data.json`` rows, or the generator's items through :func:`scene_of_item`)
and reports an accuracy next to the level a task that does not leak would give:

* **start heuristics** (m ≥ 2, chance 1/m): ``earliest_bump`` (the start whose path stays put
  first), ``first_move_bump`` (a start whose first move bumps; all when none does);
* **commit and track** (every m): commit to the earliest-bump start, track it exactly, answer its
  quarter if it enters the circle, else one of the three other quarters at random
  (``commit_earliest_bump_track``), or, the best strategy found, the clamped summed-moves quarter
  of the earliest-bump start among the others (``..._then_clamped``, m ≥ 2). Their level is the
  first strategy committing at random, computed per scene (the hard single-pass ceiling c_m of a
  task that does not leak; 66.7 / 55.6 under v1's constraints);
* **quarter heuristics** (chance 25): ``clamped_true`` (the true start plus the summed moves,
  clamped onto the board: what a chain knows after eliminating a wrong guess; for m = 1 the task
  done without the bumps), ``clamped_wrong`` (the same from a wrong start), ``chain_free`` (the
  first-move-bump start's clamped estimate: no chain written at all);
* **learned probes** (trained on one split, scored on another; torch, CPU, seconds):
  ``order_free_start`` (a small MLP scoring each candidate from its start, the circle, the blocks
  and the move histogram, a softmax over the candidates; order withheld, so it cannot simulate),
  ``lookahead_1_start`` / ``lookahead_2_start`` (the same plus each start's first 1 or 2 moves
  walked: what a model could compute before its first position word), ``order_free_answer`` (a
  permutation-invariant set model from every candidate's order-free features to the quarter).

:func:`audit` runs them all; :func:`leaks` lists those above their level + ``slack`` (5 points).
On a written benchmark (probes trained on its train split, everything scored on its test split)::

    python -m soft_spatial.data.path_audit runs/paths/seed0/data [--json audit.json]
"""
from __future__ import annotations

import argparse
import functools
import json
import math
import random
from dataclasses import asdict
from pathlib import Path
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import torch

__all__ = ["PathScene", "scene_of_item", "HEURISTICS", "heuristic_hits", "commit_and_track",
           "commit_track_then_clamped", "leak_profile", "order_free_features", "lookahead_features",
           "StartProbe", "AnswerProbe", "PROBES", "PROBE_STEPS", "AuditRow", "audit", "leaks",
           "shuffled_truth", "ceiling_formula", "audit_table", "main"]

MOVE_STEP = {"north": (0, -1), "east": (1, 0), "south": (0, 1), "west": (-1, 0)}
MOVES = tuple(MOVE_STEP)
QUARTERS = ("northwest", "northeast", "southwest", "southeast")
Cell = tuple[int, int]


def _cell(name: str) -> Cell:
    return "abcdefgh".index(name[0]), int(name[1:]) - 1


@dataclass(frozen=True)
class PathScene:
    """What a path question shows (starts, circle, blocks, moves) and its truth (the true start's
    index, the answer's quarter index 2·south + east, t*), read independently of the generator."""

    starts: tuple[Cell, ...]
    circle: Cell
    blocks: frozenset
    moves: tuple[str, ...]
    true_branch: int
    answer: int
    grid: int = 6
    t_star: int = 0

    @classmethod
    def from_row(cls, row: Mapping) -> "PathScene":
        """From a ``data.json`` row (``answer`` indexes ``options``, the quarters)."""
        options = row.get("options") or list(QUARTERS)
        return cls(tuple(_cell(b["start"]) for b in row["branches"]), _cell(row["circle"]),
                   frozenset(_cell(b) for b in row["blocks"]), tuple(row["moves"]),
                   int(row["true_branch"]), QUARTERS.index(options[int(row["answer"])]),
                   int(row.get("grid", 6)), int(row.get("t_star", 0)))

    @property
    def m(self) -> int:
        return len(self.starts)

    def quarter(self, cell: Cell) -> int:
        half = self.grid // 2
        return 2 * (cell[1] >= half) + (cell[0] >= half)

    def step(self, cell: Cell, move: str) -> Cell:
        x, y = cell[0] + MOVE_STEP[move][0], cell[1] + MOVE_STEP[move][1]
        inside = 0 <= x < self.grid and 0 <= y < self.grid and (x, y) not in self.blocks
        return (x, y) if inside else cell

    @functools.cached_property
    def walks(self) -> tuple[tuple[Cell, ...], ...]:
        """Each start's cells after every move (start first)."""
        out = []
        for s in self.starts:
            path = [s]
            for mv in self.moves:
                path.append(self.step(path[-1], mv))
            out.append(tuple(path))
        return tuple(out)

    def clamped_end(self, i: int) -> Cell:
        """Start ``i`` plus the summed moves, clamped onto the board (no bumps simulated)."""
        dx = sum(MOVE_STEP[mv][0] for mv in self.moves)
        dy = sum(MOVE_STEP[mv][1] for mv in self.moves)
        x, y = self.starts[i]
        return (min(self.grid - 1, max(0, x + dx)), min(self.grid - 1, max(0, y + dy)))

    def first_bump(self, i: int) -> int:
        """The first move at which start ``i``'s path stays put (len(moves) + 1 if never)."""
        w = self.walks[i]
        return next((s for s in range(1, len(w)) if w[s] == w[s - 1]), len(w))


def scene_of_item(item) -> PathScene:
    """The scene of a generator item (:class:`soft_spatial.data.synthetic.Item`)."""
    return PathScene.from_row({**item.extra, "answer": item.answer, "options": item.options})


def _tied_min(values: Sequence[float]) -> list[int]:
    best = min(values)
    return [i for i, v in enumerate(values) if v == best]


def _hit(picks: Sequence[int], truth: int) -> float:
    """The chance a uniform pick among ``picks`` is ``truth``."""
    return (truth in picks) / len(picks)


def _earliest_bump(s: PathScene) -> list[int]:
    return _tied_min([s.first_bump(i) for i in range(s.m)])


def _first_move_bump(s: PathScene) -> list[int]:
    return [i for i in range(s.m) if s.first_bump(i) == 1] or list(range(s.m))


def commit_and_track(s: PathScene, picks: Sequence[int]) -> float:
    """Accuracy of a hard chain that commits to a start uniformly among ``picks`` and tracks it
    exactly: if its path enters the circle it answers its last cell's quarter, else (it knows the
    start was wrong) one of the three other quarters at random. Simulated on the scene."""
    total = 0.0
    for i in picks:
        w = s.walks[i]
        end = s.quarter(w[-1])
        total += float(end == s.answer) if s.circle in w[1:] else (end != s.answer) / 3
    return total / len(picks)


def commit_track_then_clamped(s: PathScene) -> float:
    """The best hard strategy found on v1: commit to the earliest-bump start and track it; on a
    miss, take the earliest-bump start among the others and answer its clamped summed-moves
    quarter (no second chain written). Ties split."""
    total = 0.0
    first = _earliest_bump(s)
    for i in first:
        w = s.walks[i]
        if s.circle in w[1:]:
            total += float(s.quarter(w[-1]) == s.answer)
            continue
        rest = [j for j in range(s.m) if j != i]
        bumps = [s.first_bump(j) for j in rest]
        picks = [rest[k] for k in _tied_min(bumps)]
        total += sum(s.quarter(s.clamped_end(j)) == s.answer for j in picks) / len(picks)
    return total / len(first)


def _clamped_wrong(s: PathScene) -> float:
    wrong = [i for i in range(s.m) if i != s.true_branch]
    return sum(s.quarter(s.clamped_end(i)) == s.answer for i in wrong) / len(wrong)


#: heuristic -> (kind, m it applies to (min), hit function); kind "start" (level 1/m), "quarter"
#: (level 1/4) or "ceiling" (level: the same chain committing at random, per scene)
HEURISTICS: dict[str, tuple[str, int, Callable[[PathScene], float]]] = {
    "earliest_bump": ("start", 2, lambda s: _hit(_earliest_bump(s), s.true_branch)),
    "first_move_bump": ("start", 2, lambda s: _hit(_first_move_bump(s), s.true_branch)),
    "commit_earliest_bump_track": ("ceiling", 1, lambda s: commit_and_track(s, _earliest_bump(s))),
    "commit_earliest_bump_track_then_clamped": ("ceiling", 2, commit_track_then_clamped),
    "clamped_true": ("quarter", 1, lambda s: float(s.quarter(s.clamped_end(s.true_branch)) == s.answer)),
    "clamped_wrong": ("quarter", 2, _clamped_wrong),
    "chain_free": ("quarter", 2, lambda s: sum(s.quarter(s.clamped_end(i)) == s.answer
                                               for i in _first_move_bump(s)) / len(_first_move_bump(s))),
}


def _level(kind: str, s: PathScene) -> float:
    if kind == "start":
        return 1.0 / s.m
    if kind == "quarter":
        return 0.25
    return commit_and_track(s, range(s.m))


def heuristic_hits(scenes: Sequence[PathScene]) -> dict[str, tuple[float, float, int]]:
    """``{heuristic: (accuracy %, level %, n)}`` over the scenes each applies to."""
    out = {}
    for name, (kind, min_m, fn) in HEURISTICS.items():
        use = [s for s in scenes if s.m >= min_m]
        if use:
            out[name] = (100.0 * sum(map(fn, use)) / len(use),
                         100.0 * sum(_level(kind, s) for s in use) / len(use), len(use))
    return out


def leak_profile(scenes: Sequence[PathScene]) -> dict[int, dict[str, float]]:
    """Per m ≥ 2, what v1's leak is made of (%): how often the true and a wrong path bump on
    their first move, and how often the true start's clamped summed-moves estimate names the
    answer when the earliest-bump commit missed (what a chain knows after a wrong guess)."""
    out = {}
    for m in sorted({s.m for s in scenes if s.m >= 2}):
        use = [s for s in scenes if s.m == m]
        wrong = [s.first_bump(i) == 1 for s in use for i in range(m) if i != s.true_branch]
        missed = [(1 - _hit(_earliest_bump(s), s.true_branch),
                   float(s.quarter(s.clamped_end(s.true_branch)) == s.answer)) for s in use]
        weight = sum(w for w, _ in missed)
        out[m] = {"true_first_move_bump": 100.0 * sum(s.first_bump(s.true_branch) == 1 for s in use) / len(use),
                  "wrong_first_move_bump": 100.0 * sum(wrong) / len(wrong),
                  "clamped_true_after_miss": (100.0 * sum(w * h for w, h in missed) / weight
                                              if weight else math.nan)}
    return out


# -- learned probes ------------------------------------------------------------------------------
def _one_hot(n: int, i: int) -> list[float]:
    v = [0.0] * n
    if 0 <= i < n:
        v[i] = 1.0
    return v


def _room(s: PathScene, cell: Cell, move: str) -> int:
    """Free cells from ``cell`` in ``move``'s direction before the border or a block."""
    n, c = 0, cell
    while (nxt := s.step(c, move)) != c:
        n, c = n + 1, nxt
    return n


def order_free_features(s: PathScene, i: int) -> list[float]:
    """Candidate ``i``'s features with the moves' order withheld: its start, the circle, the
    blocks (one-hot / multi-hot cells), the move histogram, the start's offset from the circle,
    its free room in each direction and its clamped summed-moves endpoint's offset from the
    circle."""
    g = s.grid
    cells = g * g
    start, circle = s.starts[i], s.circle
    blocks = [0.0] * cells
    for b in s.blocks:
        blocks[b[1] * g + b[0]] = 1.0
    hist = [sum(mv == d for mv in s.moves) for d in MOVES]
    end = s.clamped_end(i)
    f = (_one_hot(cells, start[1] * g + start[0]) + _one_hot(cells, circle[1] * g + circle[0])
         + blocks)
    for count in hist:
        f += _one_hot(len(s.moves) + 1, count)
    for a, b in ((start, circle), (end, circle)):
        f += _one_hot(2 * g - 1, a[0] - b[0] + g - 1) + _one_hot(2 * g - 1, a[1] - b[1] + g - 1)
    for d in MOVES:
        f += _one_hot(g, _room(s, start, d))
    return f


def lookahead_features(s: PathScene, i: int, depth: int) -> list[float]:
    """:func:`order_free_features` plus candidate ``i``'s first ``depth`` moves walked: each move,
    whether it bumps, and the cell reached, as its offset from the circle."""
    g = s.grid
    f = order_free_features(s, i)
    w = s.walks[i]
    for t in range(1, depth + 1):
        cell = w[t]
        f += (_one_hot(4, MOVES.index(s.moves[t - 1])) + [float(w[t] == w[t - 1])]
              + _one_hot(2 * g - 1, cell[0] - s.circle[0] + g - 1)
              + _one_hot(2 * g - 1, cell[1] - s.circle[1] + g - 1))
    return f


#: Adam steps of every probe (full batch)
PROBE_STEPS = 300


def _candidate_tensor(scenes: Sequence[PathScene], featurise) -> tuple[torch.Tensor, torch.Tensor]:
    """``[n, 3, F]`` candidate features (zero-padded to 3 candidates) and the ``[n, 3]`` mask."""
    width = len(featurise(scenes[0], 0))
    x = torch.zeros(len(scenes), 3, width)
    mask = torch.zeros(len(scenes), 3, dtype=torch.bool)
    for j, s in enumerate(scenes):
        for i in range(s.m):
            x[j, i] = torch.tensor(featurise(s, i))
            mask[j, i] = True
    return x, mask


def _fit(module: torch.nn.Module, loss_fn: Callable[[], torch.Tensor], steps: int,
         lr: float = 1e-2) -> None:
    """Full-batch Adam on one thread (tiny models: more threads only add overhead, and the
    machine is shared)."""
    opt = torch.optim.Adam(module.parameters(), lr=lr, weight_decay=1e-4)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for _ in range(steps):
            opt.zero_grad()
            loss_fn().backward()
            opt.step()
    finally:
        torch.set_num_threads(threads)


class StartProbe(torch.nn.Module):
    """Scores each candidate start from its features with a small MLP (``hidden`` 0: linear, a
    conditional logit); a softmax over a scene's candidates predicts the true one. Invariant to
    the order the candidates are listed in."""

    def __init__(self, width: int, hidden: int = 64, seed: int = 0):
        super().__init__()
        torch.manual_seed(seed)
        self.net = (torch.nn.Sequential(torch.nn.Linear(width, hidden), torch.nn.ReLU(),
                                        torch.nn.Linear(hidden, 1)) if hidden
                    else torch.nn.Linear(width, 1))

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.net(x).squeeze(-1).masked_fill(~mask, float("-inf"))

    def fit(self, x, mask, truth, steps: int = PROBE_STEPS) -> "StartProbe":
        _fit(self, lambda: torch.nn.functional.cross_entropy(self(x, mask), truth), steps)
        return self

    @torch.no_grad()
    def accuracy(self, x, mask, truth) -> float:
        """% of scenes whose true start scores highest (ties split)."""
        scores = self(x, mask)
        best = scores == scores.max(-1, keepdim=True).values
        return 100.0 * float((best.gather(-1, truth[:, None]).squeeze(-1) / best.sum(-1)).mean())


class AnswerProbe(torch.nn.Module):
    """A set model (sum over candidates of an MLP of their features, then a linear map) from a
    scene's candidates to the answer's quarter: invariant to the candidates' order."""

    def __init__(self, width: int, hidden: int = 64, seed: int = 0):
        super().__init__()
        torch.manual_seed(seed)
        self.phi = torch.nn.Sequential(torch.nn.Linear(width, hidden), torch.nn.ReLU())
        self.rho = torch.nn.Sequential(torch.nn.Linear(hidden, hidden), torch.nn.ReLU(),
                                       torch.nn.Linear(hidden, 4))

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.rho((self.phi(x) * mask[..., None]).sum(1))

    def fit(self, x, mask, answer, steps: int = PROBE_STEPS) -> "AnswerProbe":
        _fit(self, lambda: torch.nn.functional.cross_entropy(self(x, mask), answer), steps)
        return self

    @torch.no_grad()
    def accuracy(self, x, mask, answer) -> float:
        return 100.0 * float((self(x, mask).argmax(-1) == answer).float().mean())


#: probe -> (what it predicts, features)
PROBES: dict[str, tuple[str, Callable]] = {
    "order_free_start": ("start", order_free_features),
    "lookahead_1_start": ("start", functools.partial(lookahead_features, depth=1)),
    "lookahead_2_start": ("start", functools.partial(lookahead_features, depth=2)),
    "order_free_answer": ("answer", order_free_features),
}


def _probe_accuracy(name: str, train: Sequence[PathScene], test: Sequence[PathScene],
                    seed: int, steps: int) -> float:
    target, featurise = PROBES[name]
    x, mask = _candidate_tensor(train, featurise)
    tx, tmask = _candidate_tensor(test, featurise)
    if target == "start":
        truth = torch.tensor([s.true_branch for s in train])
        probe = StartProbe(x.shape[-1], seed=seed).fit(x, mask, truth, steps)
        return probe.accuracy(tx, tmask, torch.tensor([s.true_branch for s in test]))
    probe = AnswerProbe(x.shape[-1], seed=seed).fit(x, mask, torch.tensor([s.answer for s in train]),
                                                    steps)
    return probe.accuracy(tx, tmask, torch.tensor([s.answer for s in test]))


@dataclass(frozen=True)
class AuditRow:
    """One audit on one set of scenes: accuracy and the level of a task without the leak, %."""

    audit: str
    m: int
    accuracy: float
    level: float
    n: int

    @property
    def excess(self) -> float:
        return self.accuracy - self.level


def audit(train: Sequence[PathScene], test: Sequence[PathScene], seed: int = 0,
          probes: Sequence[str] = tuple(PROBES), steps: int = PROBE_STEPS) -> list[AuditRow]:
    """Every heuristic on ``test`` per m, and every probe in ``probes`` trained (``steps`` Adam
    steps) on ``train``'s scenes of that m and scored on ``test``'s, for m ≥ 2."""
    rows: list[AuditRow] = []
    by_m = {m: [s for s in test if s.m == m] for m in sorted({s.m for s in test})}
    for m, scenes in by_m.items():
        for name, (acc, level, n) in heuristic_hits(scenes).items():
            rows.append(AuditRow(name, m, acc, level, n))
    for name in probes:
        for m, scenes in by_m.items():
            fit_on = [s for s in train if s.m == m]
            if m < 2 or not fit_on:
                continue
            level = 100.0 / m if PROBES[name][0] == "start" else 25.0
            rows.append(AuditRow(name, m, _probe_accuracy(name, fit_on, scenes, seed, steps),
                                 level, len(scenes)))
    return rows


def leaks(rows: Sequence[AuditRow], slack: float = 5.0) -> list[AuditRow]:
    """The audits above their level + ``slack`` points (``clamped_true`` at m = 1 excepted: there
    it is the task done without the bumps, not a shortcut)."""
    return [r for r in rows if r.excess > slack and not (r.audit == "clamped_true" and r.m == 1)]


def shuffled_truth(scenes: Sequence[PathScene], seed: int = 0) -> list[PathScene]:
    """The same scenes with the true start drawn at random and the answer its path's quarter: a
    task in which nothing but the walked paths relates to the truth (a control for the audits)."""
    rng = random.Random(seed)
    out = []
    for s in scenes:
        t = rng.randrange(s.m)
        out.append(PathScene(s.starts, s.circle, s.blocks, s.moves, t,
                             s.quarter(s.walks[t][-1]), s.grid, s.t_star))
    return out


def ceiling_formula(m: int) -> float:
    """v1's assumed hard ceiling 1/m + (1 − 1/m)/3, in % (what ``commit_and_track`` with a random
    commit gives when every wrong path ends outside the answer's quarter)."""
    return 100.0 * (1 / m + (1 - 1 / m) / 3) if m else math.nan


def audit_table(rows: Sequence[AuditRow],
                profile: Mapping[int, Mapping[str, float]] | None = None) -> str:
    """Markdown: one row per audit, a column per m (accuracy, and the level in brackets), then
    :func:`leak_profile`'s numbers."""
    profile = profile or {}
    ms = sorted({r.m for r in rows})
    cell = {(r.audit, r.m): r for r in rows}
    lines = ["| audit | " + " | ".join(f"m = {m}" for m in ms) + " |", "|---|" + "---|" * len(ms)]
    for name in dict.fromkeys(r.audit for r in rows):
        lines.append(f"| {name} | " + " | ".join(
            f"{cell[name, m].accuracy:.1f} [{cell[name, m].level:.1f}]" if (name, m) in cell else "-"
            for m in ms) + " |")
    for key in dict.fromkeys(k for p in profile.values() for k in p):
        lines.append(f"| {key} | " + " | ".join(
            f"{profile[m][key]:.1f}" if m in profile else "-" for m in ms) + " |")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> list[AuditRow]:
    from soft_spatial.data.synthetic import read_rows

    p = argparse.ArgumentParser(prog="python -m soft_spatial.data.path_audit",
                                description="Leak audits of a written benchmark's path questions.")
    p.add_argument("root", type=Path, help="the benchmark (OmniSpatial-train/ and OmniSpatial-test/)")
    p.add_argument("--json", type=Path, help="write the rows here too")
    p.add_argument("--steps", type=int, default=PROBE_STEPS, help="Adam steps of each probe")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    split = {}
    for name in ("train", "test"):
        release = a.root / f"OmniSpatial-{name}"
        if not (release / "data.json").is_file():
            p.error(f"{release / 'data.json'} does not exist (write the benchmark first)")
        split[name] = [PathScene.from_row(r) for r in read_rows(release).values()
                       if r.get("synthetic_task", "").startswith("path_")]
        if not split[name]:
            p.error(f"{release / 'data.json'} holds no path questions")
    rows = audit(split["train"], split["test"], a.seed, steps=a.steps)
    print(audit_table(rows, leak_profile(split["test"])), end="")
    found = leaks(rows)
    print(f"\n{len(found)} audits more than 5 points above their level: "
          + (", ".join(f"{r.audit} (m = {r.m})" for r in found) or "none"))
    if a.json:
        a.json.write_text(json.dumps([asdict(r) for r in rows], indent=1))
    return rows


if __name__ == "__main__":
    main()
