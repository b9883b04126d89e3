"""The ambiguous-start path tracking tasks (``path_known``, ``path_two``, ``path_three``: m = 1, 2, 3
candidate starts; docs/learning.md, "Ambiguous-start path tracking"): the board and its moves,
the hard constraints a candidate scene meets, the audited shortcuts, the rendering and the words,
and the pool selection that balances letters, true branch, t*, every shortcut and the answer
within each multiset of moves. Each task draws from its own random stream."""
from __future__ import annotations

import functools
import hashlib
import itertools
import math
import random
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from PIL import Image, ImageDraw

from soft_spatial.data.synthetic.canvas import BACKGROUND, COLORS, draw_shape
from soft_spatial.data.synthetic.config import PathKnobs, SyntheticConfig
from soft_spatial.data.synthetic.item import Decks, Item

#: path task -> m, the number of candidate starts (coloured squares)
PATH_CANDIDATES = {"path_known": 1, "path_two": 2, "path_three": 3}
PATH_COLORS = ("red", "green", "blue")  # the start squares, listed in this order
MOVES = ("north", "east", "south", "west")
_MOVE_STEP = {"north": (0, -1), "east": (1, 0), "south": (0, 1), "west": (-1, 0)}
#: the fixed, canonically ordered options of every path question (quarter index = 2·south + east)
QUARTERS = ("northwest", "northeast", "southwest", "southeast")
BLOCK = (120, 120, 120)
GRID_LINE = (60, 60, 60)


def cell_name(cell: tuple[int, int]) -> str:
    """(column, row) -> ``a1`` .. ``f6``: column letter, row number counted from the top."""
    return f"{'abcdefgh'[cell[0]]}{cell[1] + 1}"


def _quarter(cell: tuple[int, int], grid: int) -> int:
    """Index into `QUARTERS` of a cell's quarter of the board."""
    return 2 * (cell[1] >= grid // 2) + (cell[0] >= grid // 2)


def _walk(start, moves, blocked, grid) -> list[tuple[int, int]]:
    """The cells after every move (start first): a move into the border or a block is no move."""
    path = [start]
    x, y = start
    for m in moves:
        dx, dy = _MOVE_STEP[m]
        nx, ny = x + dx, y + dy
        if 0 <= nx < grid and 0 <= ny < grid and (nx, ny) not in blocked:
            x, y = nx, ny
        path.append((x, y))
    return path


def _unclipped(start, moves) -> list[tuple[int, int]]:
    """The cells after every move ignoring the border and the blocks (start first)."""
    path = [start]
    for m in moves:
        dx, dy = _MOVE_STEP[m]
        path.append((path[-1][0] + dx, path[-1][1] + dy))
    return path


def _manhattan(a, b) -> int:
    return abs(a[0] - b[0]) + abs(a[1] - b[1])


def _argmin(values: Sequence[float]) -> list[int]:
    best = min(values)
    return [i for i, v in enumerate(values) if v == best]


def _clamp(cell, grid):
    return (min(grid - 1, max(0, cell[0])), min(grid - 1, max(0, cell[1])))


#: the audited shortcuts: (name, what it predicts) -- "start" ones name a start (index into the
#: listed squares; chance 1/m, audited for m >= 2), "quarter" ones an answer (chance 1/4)
PATH_SHORTCUTS: tuple[tuple[str, str], ...] = (
    ("nearest_start", "start"),            # start nearest the circle (Manhattan)
    ("nearest_start_euclid", "start"),     # the same, straight-line distance
    ("nearest_unclipped_path", "start"),   # start whose path, ignoring walls, passes nearest it
    ("nearest_net_endpoint", "start"),     # start + summed moves nearest the circle
    ("nearest_clamped_endpoint", "start"),  # the same, clamped onto the board
    ("circle_quarter", "quarter"),         # the circle's quarter
    ("nearest_start_quarter", "quarter"),  # the quarter of the start nearest the circle
    ("nearest_start_net_quarter", "quarter"),  # its summed moves, clamped onto the board
    ("continue_after_3", "quarter"),       # from the circle with the moves after step 3 ...
    ("continue_after_4", "quarter"),
    ("continue_after_5", "quarter"),
    ("continue_after_6", "quarter"),
)


def _shortcuts(starts, circle, moves, blocked, grid) -> dict[str, list[int]]:
    """What each audited shortcut predicts (ties kept: every index that ties for best)."""
    net = (sum(_MOVE_STEP[m][0] for m in moves), sum(_MOVE_STEP[m][1] for m in moves))
    ends = [(s[0] + net[0], s[1] + net[1]) for s in starts]
    nearest = _argmin([_manhattan(s, circle) for s in starts])
    out = {
        "nearest_start": nearest,
        "nearest_start_euclid": _argmin([math.dist(s, circle) for s in starts]),
        "nearest_unclipped_path": _argmin([min(_manhattan(c, circle) for c in _unclipped(s, moves)[1:])
                                           for s in starts]),
        "nearest_net_endpoint": _argmin([_manhattan(e, circle) for e in ends]),
        "nearest_clamped_endpoint": _argmin([_manhattan(_clamp(e, grid), circle) for e in ends]),
        "circle_quarter": [_quarter(circle, grid)],
        "nearest_start_quarter": sorted({_quarter(starts[i], grid) for i in nearest}),
        "nearest_start_net_quarter": sorted({_quarter(_clamp(ends[i], grid), grid) for i in nearest}),
    }
    for t in range(3, 7):
        end = _walk(circle, moves[t:], blocked, grid)[-1] if t < len(moves) else circle
        out[f"continue_after_{t}"] = [_quarter(end, grid)]
    return out


def _audited(name: str, kind: str, m: int) -> bool:
    """Whether a shortcut is balanced for m starts: the start ones only when there is a choice;
    for m = 1 the start's summed moves is no shortcut but the task done without the bumps (its
    quarter is the answer in ~84% of raw scenes; see docs/learning.md)."""
    return m > 1 or (kind == "quarter" and name != "nearest_start_net_quarter")


def _shortcut_hits(features: dict[str, list[int]], true_branch: int, answer: int,
                   m: int) -> tuple[float, ...]:
    """Per audited shortcut: the chance it is right, ties broken at random (start shortcuts
    only for m >= 2)."""
    hits = []
    for name, kind in PATH_SHORTCUTS:
        if not _audited(name, kind, m):
            continue
        pred = features[name]
        truth = true_branch if kind == "start" else answer
        hits.append(1.0 / len(pred) if truth in pred else 0.0)
    return tuple(hits)


def _shortcut_chance(m: int) -> tuple[float, ...]:
    return tuple(1.0 / m if kind == "start" else 0.25 for name, kind in PATH_SHORTCUTS
                 if _audited(name, kind, m))


@dataclass
class _PathScene:
    """One candidate question: everything the record, the renderer and the words need."""

    m: int
    colors: tuple[str, ...]
    starts: tuple[tuple[int, int], ...]
    true_branch: int
    circle: tuple[int, int]
    blocks: tuple[tuple[int, int], ...]
    moves: tuple[str, ...]
    t_star: int
    paths: list[list[tuple[int, int]]]
    answer: int
    features: dict[str, list[int]]
    hits: tuple[float, ...]


@functools.lru_cache(maxsize=4096)
def _step_table(blocks: tuple, grid: int) -> dict:
    """``{(move, cell): the cell after it}`` on a board with these blocks."""
    return {(mv, c): _walk(c, (mv,), set(blocks), grid)[1] for mv in MOVES
            for c in itertools.product(range(grid), repeat=2) if c not in blocks}


class _Walks(dict):
    """The path from each start under one sequence of moves, walked when first asked for."""

    def __init__(self, step: dict, moves: Sequence[str]):
        super().__init__()
        self.step, self.moves = step, moves

    def __missing__(self, start):
        walk = [start]
        for mv in self.moves:
            walk.append(self.step[mv, walk[-1]])
        self[start] = walk
        return walk


def _path_candidate(rng: random.Random, m: int, t_star: int, true_branch: int,
                    k: PathKnobs) -> _PathScene | None:
    """A scene that meets the hard constraints, or None (draw again). The constraints:

    1. wrong paths never enter the circle; 2. the true path enters it first at t*; 3. the m paths
    are pairwise distinct at every step <= t* (unless allow_merge); 4. the true path bumps (border
    or block) before t*, and no unclipped path (walls ignored) ever enters the circle; 5. every
    wrong path passes next to the circle (Manhattan distance 1); 6. the m endpoints lie in m
    different quarters; 7. continuing from the circle after any other step t' of the window never
    ends in the answer quarter."""
    g = k.grid
    cells = [(x, y) for y in range(g) for x in range(g)]
    blocks = tuple(sorted(rng.sample(cells, k.blocks)))
    blocked = set(blocks)
    moves = tuple(rng.choice(MOVES) for _ in range(k.moves))
    free = [c for c in cells if c not in blocked]
    walks = _Walks(_step_table(blocks, g), moves)
    net = _unclipped((0, 0), moves)
    if max(abs(net[-1][0]), abs(net[-1][1])) > g // 2 - 1:  # a long net drift names the answer
        return None
    rng.shuffle(free)
    lo, hi = k.window
    for true_start in free:  # the first start that meets the constraints, for these moves
        path = walks[true_start]
        circle = path[t_star]
        if circle in path[:t_star]:  # 2: first entry at t* (and the start is not the circle)
            continue
        if not any(path[s] == path[s - 1] for s in range(1, t_star)):  # 4: a bump before t*
            continue
        if any((true_start[0] + dx, true_start[1] + dy) == circle for dx, dy in net[1:]):  # 4
            continue
        answer = _quarter(path[-1], g)
        if any(t != t_star and _quarter(_walk(circle, moves[t:], blocked, g)[-1], g) == answer
               for t in range(lo, hi + 1)):  # 7
            continue
        wrong = _wrong_paths(rng, m, free, walks, net, path, circle, answer, t_star, k)
        if wrong is not None:
            break
    else:
        return None
    drawn = rng.sample(PATH_COLORS, m)
    colors = tuple(c for c in PATH_COLORS if c in drawn)
    paths = wrong[:true_branch] + [path] + wrong[true_branch:]
    starts = tuple(p[0] for p in paths)
    features = _shortcuts(starts, circle, moves, blocked, g)
    return _PathScene(m, colors, starts, true_branch, circle, blocks, moves, t_star, paths, answer,
                      features, _shortcut_hits(features, true_branch, answer, m))


def _wrong_paths(rng, m, free, walks, net, path, circle, answer, t_star, k):
    """m - 1 wrong paths for constraints 1 and 3-6, or None."""
    wrong: list[list[tuple[int, int]]] = []
    if m == 1:
        return wrong
    options = [c for c in free if c not in (path[0], circle)]
    rng.shuffle(options)
    for c in options:
        p = walks[c]
        if (circle in p  # 1
                or min(_manhattan(q, circle) for q in p[1:]) != 1  # 5
                or any((c[0] + dx, c[1] + dy) == circle for dx, dy in net[1:])  # 4
                or _quarter(p[-1], k.grid) == answer  # 6
                or any(_quarter(w[-1], k.grid) == _quarter(p[-1], k.grid) for w in wrong)):
            continue
        if not k.allow_merge and any(p[s] == w[s] for w in [path] + wrong
                                     for s in range(t_star + 1)):  # 3
            continue
        wrong.append(p)
        if len(wrong) == m - 1:
            return wrong
    return None


def _render_board(scene: _PathScene, size: int, grid: int) -> Image.Image:
    """The board: grid lines, grey blocks (whole cells), the start squares and the purple circle
    (centred in their cells)."""
    image = Image.new("RGB", (size, size), BACKGROUND)
    draw = ImageDraw.Draw(image)
    c = size // grid
    for x, y in scene.blocks:
        draw.rectangle([x * c + 1, y * c + 1, (x + 1) * c - 1, (y + 1) * c - 1], fill=BLOCK)
    for i in range(grid + 1):
        p = min(i * c, size - 1)
        draw.line([(p, 0), (p, size - 1)], fill=GRID_LINE)
        draw.line([(0, p), (size - 1, p)], fill=GRID_LINE)
    r = c * 0.3
    for color, (x, y) in zip(scene.colors, scene.starts):
        draw_shape(draw, "square", (x + 0.5) * c, (y + 0.5) * c, r, COLORS[color])
    x, y = scene.circle
    draw_shape(draw, "circle", (x + 0.5) * c, (y + 0.5) * c, r, COLORS["purple"])
    return image


def _path_words(scene: _PathScene, describe: bool) -> tuple[str, str]:
    """(question, reasoning). The reasoning is the true path, each move word then the cell it
    leads to, ``circle`` after the step that first enters it, then ``: <cell> <quarter>``."""
    moves = ", ".join(scene.moves)
    where = "on the square" if scene.m == 1 else "on one of the squares"
    question = (f"A robot starts {where} and moves {moves}. The border and grey blocks stop it. "
                f"It passed over the purple circle. In which quarter of the board is it now?")
    if describe:
        parts = [f"{col} square at {cell_name(s)}" for col, s in zip(scene.colors, scene.starts)]
        parts.append(f"purple circle at {cell_name(scene.circle)}")
        parts += [f"grey block at {cell_name(b)}" for b in sorted(scene.blocks, key=cell_name)]
        question = "Scene: " + "; ".join(parts) + ". " + question
    path = scene.paths[scene.true_branch]
    steps = []
    for s, move in enumerate(scene.moves, 1):
        steps += [move, cell_name(path[s])] + (["circle"] if s == scene.t_star else [])
    reasoning = " ".join(steps) + f" : {cell_name(path[-1])} {QUARTERS[scene.answer]}"
    return question, reasoning


def _path_item(task: str, scene: _PathScene, cfg: SyntheticConfig) -> Item:
    k = cfg.paths
    question, reasoning = _path_words(scene, cfg.describe)
    extra = {
        "grid": k.grid, "moves": list(scene.moves),
        "branches": [{"color": col, "start": cell_name(p[0]), "cells": [cell_name(c) for c in p[1:]]}
                     for col, p in zip(scene.colors, scene.paths)],
        "true_branch": scene.true_branch, "t_star": scene.t_star,
        "circle": cell_name(scene.circle), "blocks": sorted(cell_name(b) for b in scene.blocks),
        "shortcut_features": scene.features,
    }
    return Item(task, _render_board(scene, cfg.size, k.grid), question, list(QUARTERS),
                scene.answer, reasoning, extra)


#: the greedy selection's weight on an uneven answer within a multiset of moves, against the
#: squared distance of the shortcuts' counts from chance
_MULTISET_WEIGHT = 6.0


def path_batch(task: str, count: int, seed: int, split: str, cfg: SyntheticConfig,
               exclude: set) -> list[Item]:
    """``count`` questions of a path task: a pool of ``pool_factor`` × ``count`` candidates that
    meet the hard constraints, then a greedy selection. Each slot asks for an answer quarter, a
    true branch and a t* from shuffled decks (all three balanced), and takes, among the pool's
    candidates with those, the one that keeps every audited shortcut closest to its chance
    count and the answers within its multiset of moves most even (so no lookup of the moves,
    order ignored, predicts the answer)."""
    k, m = cfg.paths, PATH_CANDIDATES[task]
    digest = hashlib.sha256(f"{seed}/{split}/{task}".encode()).digest()
    rng = random.Random(int.from_bytes(digest[:8], "big"))
    lo, hi = k.window
    combos = [(t, b) for t in range(lo, hi + 1) for b in range(m)]
    # pool: buckets by (answer, t*, branch) -> {(hits, multiset): [scenes]}
    pool: dict[tuple, dict[tuple, list[_PathScene]]] = defaultdict(lambda: defaultdict(list))
    want = k.pool_factor * count
    made, tries = 0, 0
    while made < want:
        t_star, branch = combos[made % len(combos)]
        scene = _path_candidate(rng, m, t_star, branch, k)
        tries += 1
        if tries > 2000 * max(want, 1):  # pragma: no cover - infeasible knobs
            raise RuntimeError(f"{task}: the path constraints leave no scenes ({k})")
        if scene is None:
            continue
        ms = tuple(sorted(Counter(scene.moves).items()))
        pool[(scene.answer, scene.t_star, scene.true_branch)][(scene.hits, ms)].append(scene)
        made += 1
    chance = _shortcut_chance(m)
    totals = [0.0] * len(chance)
    by_ms: dict[tuple, list[int]] = defaultdict(lambda: [0, 0, 0, 0])
    decks = {"answer": Decks(random.Random(rng.random())), "t": Decks(random.Random(rng.random())),
             "branch": Decks(random.Random(rng.random()))}
    items: list[Item] = []
    while len(items) < count:
        want_key = (decks["answer"].draw(4), lo + decks["t"].draw(hi - lo + 1), decks["branch"].draw(m))
        keys = [want_key] if pool.get(want_key) else [
            key for key in pool if pool[key] and key[0] == want_key[0]] or [
            key for key in pool if pool[key]]
        if not keys:  # pragma: no cover - every candidate collided with the excluded set
            raise RuntimeError(f"{task}: the candidate pool ran out")
        n = len(items) + 1
        best, best_cost = None, None
        for key in keys:
            for bucket in pool[key]:
                hits, ms = bucket
                counts = by_ms[ms]
                cost = sum((tot + h - n * c) ** 2 for tot, h, c in zip(totals, hits, chance))
                cost += _MULTISET_WEIGHT * (counts[key[0]] - min(counts))
                if best_cost is None or cost < best_cost:
                    best, best_cost = (key, bucket), cost
        key, bucket = best
        scene = pool[key][bucket].pop()
        if not pool[key][bucket]:
            del pool[key][bucket]
        item = _path_item(task, scene, cfg)
        if item.signature() in exclude:
            continue
        exclude.add(item.signature())
        totals = [tot + h for tot, h in zip(totals, scene.hits)]
        by_ms[bucket[1]][scene.answer] += 1
        items.append(item)
    return items


def path_shortcut_accuracy(items: Sequence[Item]) -> dict[str, dict[str, float]]:
    """``{task: {shortcut: accuracy %}}`` of the audited shortcuts over a split's path questions
    (ties broken at random: a tied prediction counts 1/#tied), from their ``shortcut_features``."""
    out: dict[str, dict[str, float]] = {}
    for task, m in PATH_CANDIDATES.items():
        its = [it for it in items if it.task == task]
        if its:
            names = [name for name, kind in PATH_SHORTCUTS if _audited(name, kind, m)]
            hits = [_shortcut_hits(it.extra["shortcut_features"], it.extra["true_branch"],
                                   it.answer, m) for it in its]
            out[task] = {n: 100.0 * sum(h[j] for h in hits) / len(its) for j, n in enumerate(names)}
    return out
