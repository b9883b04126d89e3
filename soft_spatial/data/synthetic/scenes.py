"""The five scene tasks (relative position, depth order, egocentric, mental rotation, counting): each
draws its scene on a `Canvas`, asks its question and decides the answer; with ``describe`` the
scene in words (`CELLS`, `COMPASS`) decides it alone. `make_item` puts the answer at the letter
the decks ask for."""
from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import replace

from soft_spatial.data.synthetic.canvas import (COLORS, DIRECTIONS, SHAPES, UNIT, Canvas, Retry,
                                                canvas_for)
from soft_spatial.data.synthetic.config import Difficulty, SyntheticConfig
from soft_spatial.data.synthetic.item import Item


def _colors(rng: random.Random, k: int) -> list[str]:
    return rng.sample(list(COLORS), k)


def _distractors(canvas: Canvas, rng: random.Random, colors: Sequence[str], n: int,
                 d: Difficulty) -> None:
    for _ in range(n):
        r = canvas.radius(d.object_size) * 0.8
        x, y = canvas.free_spot(r)
        canvas.shape(rng.choice(SHAPES), x, y, r, rng.choice(colors))
        canvas.add(x, y, r)


#: the 3x3 grid cells and the arrows' directions in compass words, as on a map (north up): no
#: word of a scene is an answer option, so a reader that matches its answer against the options
#: finds it there only
CELLS = (("northwest", "north", "northeast"), ("west", "center", "east"),
         ("southwest", "south", "southeast"))  # [row][column]
COMPASS = {"up": "north", "right": "east", "down": "south", "left": "west"}


def _where(cell: tuple[int, int]) -> str:
    """A 3x3 grid cell (column, row) in words: ``northwest`` .. ``southeast``."""
    return CELLS[cell[1]][cell[0]]


def _size_digit(r: float, cell: int) -> int:
    """A shape's size on a 1-9 scale (9: it fills its cell)."""
    return max(1, min(9, round(9 * r / (cell / 2))))


def _describe(canvas: Canvas, rng: random.Random, sizes: bool = False) -> tuple[str, list]:
    """The scene in words, objects in a random order: ``Scene: red square at northwest; green
    arrow at center, pointing north.`` Returns the text and the objects in that order."""
    objects = list(canvas.objects)
    rng.shuffle(objects)
    parts = []
    for o in objects:
        text = f"{o['color']} {o['shape']} at {_where(canvas.cell_of(o['x'], o['y']))}"
        if "direction" in o:
            text += f", pointing {COMPASS[o['direction']]}"
        if sizes:
            text += f", size {_size_digit(o['r'], canvas.cell)}"
        parts.append(text)
    return "Scene: " + "; ".join(parts) + ".", objects


def _relation(dx: float, dy: float) -> tuple[str, float]:
    """The dominant direction of offset (dx, dy) (image coordinates) and its lead over the
    other axis."""
    if abs(dx) >= abs(dy):
        return ("right" if dx > 0 else "left"), abs(dx) - abs(dy)
    return ("below" if dy > 0 else "above"), abs(dy) - abs(dx)


def _relative_position(rng, cfg: SyntheticConfig):
    d = cfg.difficulty
    canvas = canvas_for(cfg, rng)
    ca, cb, *rest = _colors(rng, 2 + min(d.distractors, 4))
    sa, sb = rng.choice(SHAPES), rng.choice(SHAPES)
    rb = canvas.radius(d.object_size)
    bx, by = canvas.free_spot(rb)
    canvas.add(bx, by, rb)
    ra = canvas.radius(d.object_size)
    cell_b = canvas.cell_of(bx, by) if cfg.describe else None

    def clear(x, y):  # the pixels decide with a margin; described, the cells decide the same way
        answer, lead = _relation(x - bx, y - by)
        if not cfg.describe:
            return lead >= d.margin
        (i, j), (bi, bj) = canvas.cell_of(x, y), cell_b
        by_cells, cell_lead = _relation(i - bi, j - bj)
        return lead >= d.margin and cell_lead > 0 and by_cells == answer

    ax, ay = canvas.free_spot(ra, accept=clear)
    canvas.add(ax, ay, ra)
    canvas.shape(sb, bx, by, rb, cb)
    canvas.shape(sa, ax, ay, ra, ca)
    _distractors(canvas, rng, rest or [c for c in COLORS if c not in (ca, cb)], d.distractors, d)
    answer, _ = _relation(ax - bx, ay - by)
    question = f"Where is the {ca} {sa} relative to the {cb} {sb}?"
    reasoning = answer
    if cfg.describe:
        scene, _ = _describe(canvas, rng)
        question = f"{scene} {question}"
        reasoning = (f"{ca} {sa} {_where(canvas.cell_of(ax, ay))}, {cb} {sb} "
                     f"{_where(cell_b)}: {answer}")
    return canvas.image, question, answer, ["left", "right", "above", "below"], reasoning


def _depth_order(rng, cfg: SyntheticConfig, n: int):
    d = cfg.difficulty
    canvas = canvas_for(cfg, rng)
    colors = _colors(rng, n)
    shapes = [rng.choice(SHAPES) for _ in range(n)]
    hi = d.object_size[1]
    top = canvas.radius((hi, hi * 1.35))  # the closest (largest) shape
    radii = [top]
    for _ in range(n - 1):  # every other shape at least size_ratio smaller than the closest
        radii.append(top / rng.uniform(d.size_ratio, d.size_ratio * 1.5))
    names = [f"the {c} {s}" for c, s in zip(colors, shapes)]
    question = "Which shape is closest to the camera?"
    if cfg.layout == "grid":  # one shape per cell: no occlusion, size is the cue
        centres = []
        for r in radii:
            centres.append(canvas.free_spot(r))
            canvas.add(*centres[-1], r)
        for i in sorted(range(n), key=lambda i: radii[i]):
            canvas.shape(shapes[i], *centres[i], radii[i], colors[i])
        if not cfg.describe:
            return canvas.image, question, names[0], names, colors[0]
        digits = [_size_digit(r, canvas.cell) for r in radii]
        if digits[0] <= max(digits[1:]):  # the described sizes must single out the closest
            raise Retry()
        scene, objects = _describe(canvas, rng, sizes=True)
        sizes = " ".join(str(_size_digit(o["r"], canvas.cell)) for o in objects)
        reasoning = f"sizes {sizes}, largest {digits[0]}: {colors[0]}"
        return canvas.image, f"{scene} {question}", names[0], names, reasoning
    centres: list[tuple[float, float]] = []
    for r in radii:  # shapes may overlap, but no centre lies inside another shape
        for _ in range(200):
            x, y = rng.uniform(r, cfg.size - r), rng.uniform(r, cfg.size - r)
            if all(math.hypot(x - a, y - b) > max(r, radii[j]) for j, (a, b) in enumerate(centres)):
                break
        else:
            raise Retry()
        centres.append((x, y))
    for i in sorted(range(n), key=lambda i: radii[i]):  # farthest first: closer shapes occlude
        canvas.shape(shapes[i], *centres[i], radii[i], colors[i])
    return canvas.image, question, names[0], names, colors[0]


def _egocentric(rng, cfg: SyntheticConfig):
    d = cfg.difficulty
    canvas = canvas_for(cfg, rng)
    c_arrow, c_target, *rest = _colors(rng, 2 + min(d.distractors, 4))
    facing = rng.choice(DIRECTIONS)
    fx, fy = UNIT[facing]
    rx, ry = -fy, fx  # your right hand, seen from above (image y points down)
    r_arrow = canvas.radius((d.object_size[0] * 1.1, d.object_size[1] * 1.1), arrow=True)
    ax, ay = canvas.free_spot(r_arrow)
    canvas.add(ax, ay, r_arrow)
    r_t = canvas.radius(d.object_size) * 0.8

    def side(dx, dy):
        fwd, lat = dx * fx + dy * fy, dx * rx + dy * ry
        if abs(lat) >= abs(fwd):
            return ("right" if lat > 0 else "left"), abs(lat) - abs(fwd)
        return ("front" if fwd > 0 else "behind"), abs(fwd) - abs(lat)

    def clear(x, y):  # as in _relative_position: described, the cells decide the same way
        where, lead = side(x - ax, y - ay)
        if not cfg.describe:
            return lead >= d.margin
        (i, j), (ai, aj) = canvas.cell_of(x, y), canvas.cell_of(ax, ay)
        by_cells, cell_lead = side(i - ai, j - aj)
        return lead >= d.margin and cell_lead > 0 and by_cells == where

    tx, ty = canvas.free_spot(r_t, accept=clear)
    canvas.add(tx, ty, r_t)
    canvas.arrow(facing, ax, ay, r_arrow, c_arrow)
    shape = rng.choice(SHAPES)
    canvas.shape(shape, tx, ty, r_t, c_target)
    _distractors(canvas, rng, rest or [c for c in COLORS if c not in (c_arrow, c_target)],
                 d.distractors, d)
    where, _ = side(tx - ax, ty - ay)
    question = (f"Imagine you stand at the {c_arrow} arrow, facing the way it points. "
                f"Where is the {c_target} {shape}?")
    reasoning = f"facing {facing}, {where}"
    if cfg.describe:
        scene, _ = _describe(canvas, rng)
        question = f"{scene} {question}"
        reasoning = (f"arrow {_where(canvas.cell_of(ax, ay))} facing {COMPASS[facing]}, "
                     f"{c_target} {shape} {_where(canvas.cell_of(tx, ty))}: {where}")
    return (canvas.image, question, EGO_OPTIONS[where], list(EGO_OPTIONS.values()), reasoning)


EGO_OPTIONS = {"left": "on your left", "right": "on your right", "front": "in front of you",
                "behind": "behind you"}
TURNS = {"90 degrees clockwise": 1, "90 degrees counterclockwise": -1, "180 degrees": 2}


def _mental_rotation(rng, cfg: SyntheticConfig):
    d = cfg.difficulty
    canvas = canvas_for(cfg, rng)
    (color,) = _colors(rng, 1)
    start = rng.choice(DIRECTIONS)
    turn = rng.choice(list(TURNS))
    end = DIRECTIONS[(DIRECTIONS.index(start) + TURNS[turn]) % 4]
    r = canvas.radius((d.object_size[1], d.object_size[1] * 1.5), arrow=True)
    x, y = canvas.free_spot(r)
    canvas.arrow(start, x, y, r, color)
    question = (f"The {color} arrow is turned {turn} in the picture plane. "
                f"Which way does it point after the turn?")
    reasoning = f"{start}, turned: {end}"
    if cfg.describe:
        question = f"{_describe(canvas, rng)[0]} {question}"
        reasoning = f"{COMPASS[start]}, turned: {end}"
    return canvas.image, question, end, list(DIRECTIONS), reasoning


def _counting(rng, cfg: SyntheticConfig):
    d = cfg.difficulty
    canvas = canvas_for(cfg, rng)
    target, *others = _colors(rng, 1 + max(1, min(d.distractors, 3)))
    count = rng.randint(1, d.max_count)
    for _ in range(count):
        r = canvas.radius(d.object_size) * 0.7
        x, y = canvas.free_spot(r)
        canvas.add(x, y, r)
        canvas.shape(rng.choice(SHAPES), x, y, r, target)
    _distractors(canvas, rng, others, d.distractors, replace(d, object_size=(
        d.object_size[0] * 0.9, d.object_size[1] * 0.9)))
    # counts 1..max_count and one more; canonical: 1..max(max_count, 4), so four options are
    # always 1-4 and a count's letter does not depend on which wrong counts were drawn
    top = max(d.max_count, 4) if cfg.option_order == "canonical" else d.max_count + 1
    pool = [str(k) for k in range(1, top + 1)]
    question, reasoning = f"How many {target} shapes are in the picture?", str(count)
    if cfg.describe:
        scene, objects = _describe(canvas, rng)
        question = f"{scene} {question}"
        reasoning = ", ".join(f"{o['color']} {o['shape']}" for o in objects
                              if o["color"] == target) + f": {count}"
    return canvas.image, question, str(count), pool, reasoning


def _canonical_order(task: str, choices: Sequence[str]) -> list[str]:
    """The task's fixed option order (`SyntheticConfig.option_order`): as the task lists its
    choices (left, right, above, below; up, right, down, left; counts ascending; on your left,
    right, in front, behind), shapes by their colour's place in `COLORS`."""
    if task == "depth_order":
        return sorted(choices, key=lambda name: list(COLORS).index(name.split()[1]))
    return list(choices)


def make_item(task: str, rng: random.Random, cfg: SyntheticConfig, n: int, pos: int) -> Item:
    """One question of ``task`` with ``n`` options and the correct one at index ``pos``."""
    tries = 100 if cfg.option_order == "shuffled" else 2000  # canonical also redraws for pos
    for _ in range(tries):
        try:
            if task == "depth_order":
                image, question, answer, choices, reasoning = _depth_order(rng, cfg, n)
            else:
                image, question, answer, choices, reasoning = {
                    "relative_position": _relative_position, "egocentric": _egocentric,
                    "mental_rotation": _mental_rotation, "counting": _counting}[task](rng, cfg)
        except Retry:
            continue
        wrong = [c for c in choices if c != answer]
        rng.shuffle(wrong)
        options = wrong[: n - 1]
        if len(options) < n - 1:
            raise ValueError(f"{task}: only {len(options) + 1} distinct options for n={n}")
        if cfg.option_order == "canonical":
            order = _canonical_order(task, choices)
            options = sorted(options + [answer], key=order.index)
            if options.index(answer) != pos:  # keep the letters balanced: draw again
                continue
        else:
            options.insert(pos, answer)
        return Item(task, image, question, options, options.index(answer), reasoning)
    raise RuntimeError(f"{task}: could not lay out a scene in {tries} tries (size {cfg.size} too "
                       f"small for the difficulty knobs?)")
