"""A synthetic spatial benchmark in the OmniSpatial release layout: ``python -m soft_spatial.data.synthetic``.

Scenes are rendered with PIL (coloured squares, circles, triangles and arrows on a grey canvas) and
every question is multiple choice with 2-4 options, so the whole pipeline (``data.prepare``,
``soft_spatial.train``, ``soft_spatial.eval``) reads it through the real OmniSpatial loader::

    OUT/OmniSpatial-train/data.json + <task_type>/<image_no>.png
    OUT/OmniSpatial-test/data.json  + <task_type>/<image_no>.png     (held out, disjoint)
    OUT/README.md                                                    (tasks, knobs, chance levels)

Five tasks, each mapped onto one OmniSpatial (task_type, sub_task_type) so per-sub-task accuracy is
per-task accuracy:

============================  ==============================================  =====================
task                          question                                        OmniSpatial type
============================  ==============================================  =====================
``relative_position``         where is the red square relative to the blue    Spatial_Interaction /
                              circle? (left / right / above / below)          Localization
``depth_order``               which shape is closest to the camera? (the      Spatial_Interaction /
                              biggest; closer shapes occlude farther ones)    Geospatial_Strategy
``egocentric``                standing at the green arrow, facing where it    Perspective_Taking /
                              points, is the red square on your left, right,  Egocentric
                              in front or behind?
``mental_rotation``           the arrow is turned 90° clockwise: which way    Dynamic_Reasoning /
                              does it point now?                              Manipulation
``counting``                  how many red shapes are there?                  Complex_Logic /
                                                                              Pattern_Recognition
============================  ==============================================  =====================

Every record also carries ``synthetic_task``, ``difficulty`` and ``reasoning`` (a few words that
decide the answer, e.g. ``"up, turned clockwise: right"``), which the warm start
(:mod:`soft_spatial.lab.warmstart`) uses as the text inside ``<think>``.

Answer letters are balanced: for every option count the correct position cycles through a
shuffled deck of all positions. Scenes use a grid layout by default (one object per 32-pixel
cell, the tiny models' image tokens; ``--layout free`` places objects anywhere). Everything is a
pure function of (split, seed, knobs); the test split draws from its own random stream and any
test item whose image and question also occur in train is redrawn, so the splits are disjoint.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import math
import random
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from PIL import Image, ImageDraw

from soft_spatial.data.prompt import SYSTEM_PROMPT

__all__ = ["TASKS", "Difficulty", "DIFFICULTIES", "SyntheticConfig", "Item", "generate_split",
           "write_benchmark", "chance_levels", "chance_levels_of_release", "corpus", "read_reasoning", "main"]

#: task -> (OmniSpatial task_type, sub_task_type)
TASKS: dict[str, tuple[str, str]] = {
    "relative_position": ("Spatial_Interaction", "Localization"),
    "depth_order": ("Spatial_Interaction", "Geospatial_Strategy"),
    "egocentric": ("Perspective_Taking", "Egocentric"),
    "mental_rotation": ("Dynamic_Reasoning", "Manipulation"),
    "counting": ("Complex_Logic", "Pattern_Recognition"),
}
SUB_TASK_TO_TASK = {sub: task for task, (_, sub) in TASKS.items()}

COLORS: dict[str, tuple[int, int, int]] = {
    "red": (220, 40, 40), "green": (30, 160, 60), "blue": (40, 80, 230),
    "yellow": (235, 200, 30), "purple": (150, 50, 190), "orange": (245, 130, 20),
}
SHAPES = ("square", "circle", "triangle")
DIRECTIONS = ("up", "right", "down", "left")  # clockwise order, image coordinates (y down)
_UNIT = {"up": (0, -1), "right": (1, 0), "down": (0, 1), "left": (-1, 0)}
BACKGROUND = (225, 225, 225)


@dataclass(frozen=True)
class Difficulty:
    """The knobs that make questions harder.

    distractors: extra shapes in other colours (relative position, egocentric, counting).
    margin: how much larger (in pixels) the deciding offset must be than the other axis
        (relative position, egocentric); smaller = more ambiguous layouts.
    size_ratio: the closest shape is at least this many times larger than the next (depth).
    max_count: counting answers range over 1..max_count.
    object_size: shape size range as fractions of the image side.
    """

    distractors: int = 1
    margin: float = 6.0
    size_ratio: float = 1.3
    max_count: int = 4
    object_size: tuple[float, float] = (0.16, 0.24)


DIFFICULTIES: dict[str, Difficulty] = {
    "easy": Difficulty(distractors=0, margin=12.0, size_ratio=1.6, max_count=3,
                       object_size=(0.2, 0.28)),
    "medium": Difficulty(),
    "hard": Difficulty(distractors=2, margin=2.0, size_ratio=1.15, max_count=5,
                       object_size=(0.12, 0.2)),
}


@dataclass(frozen=True)
class SyntheticConfig:
    """What to generate: image side in pixels (a multiple of 32 keeps the tiny models' patch
    grid exact), the tasks, the allowed option counts, the difficulty and the layout: ``grid``
    puts one object per ``cell``-pixel square (with 32, the tiny Qwen3-VL's image tokens: 16-pixel
    patches merged 2x2), ``free`` anywhere without overlap (harder to read).

    ``describe``: the question starts with a text description of the scene, every object with its
    colour, shape and grid cell in compass words (``northwest`` .. ``southeast``; arrows with
    their direction, ``pointing north``; in depth questions a size 1-9), and every answer is
    decided by that description alone (layouts whose cells would leave it ambiguous are
    redrawn). A model can then answer by reading text, which a tiny model trained from scratch
    partly learns in minutes, where it never learns to read the pixels (docs/results/learning.md).

    ``option_order``: ``shuffled`` (the answer's position drawn from a balanced deck, the others
    in random order), or ``canonical``: every task lists its options in one fixed order (left,
    right, above, below; up, right, down, left; counts ascending; colours in `COLORS` order), so
    the letter follows from the answer itself and a reader need not find its answer among the
    options; letters stay balanced (the scene is redrawn until its answer sits at the deck's
    position)."""

    size: int = 96
    tasks: tuple[str, ...] = tuple(TASKS)
    options: tuple[int, ...] = (2, 3, 4)
    difficulty: Difficulty = field(default_factory=Difficulty)
    difficulty_name: str = "medium"
    layout: str = "grid"
    cell: int = 32
    describe: bool = False
    option_order: str = "shuffled"

    def __post_init__(self):
        unknown = [t for t in self.tasks if t not in TASKS]
        if unknown or not self.tasks:
            raise ValueError(f"unknown synthetic tasks {unknown}; choose from {list(TASKS)}")
        if not self.options or any(n not in (2, 3, 4) for n in self.options):
            raise ValueError(f"option counts must be among 2, 3, 4; got {self.options}")
        if self.size < 32:
            raise ValueError(f"image size must be at least 32 pixels, got {self.size}")
        if self.layout not in ("grid", "free"):
            raise ValueError(f"layout must be 'grid' or 'free', got {self.layout!r}")
        if self.layout == "grid" and self.size // self.cell < 3:
            raise ValueError(f"a grid layout needs at least 3x3 cells: size {self.size} // cell "
                             f"{self.cell} < 3 (use layout='free' for small images)")
        if self.describe and (self.layout != "grid" or self.size // self.cell != 3):
            raise ValueError(f"describe=True names grid cells (northwest .. southeast): it needs "
                             f"layout='grid' with 3x3 cells, got layout {self.layout!r}, "
                             f"size {self.size} // cell {self.cell} = {self.size // self.cell}")
        if self.option_order not in ("shuffled", "canonical"):
            raise ValueError(f"option_order must be 'shuffled' or 'canonical', got "
                             f"{self.option_order!r}")
        if self.difficulty.max_count < 2:
            raise ValueError(f"max_count must be >= 2, got {self.difficulty.max_count}")


@dataclass
class Item:
    """One question with its image (before it is written to disk)."""

    task: str
    image: Image.Image
    question: str
    options: list[str]
    answer: int
    reasoning: str

    def signature(self) -> str:
        """Identity of the (image, question, options) triple, for the disjointness check."""
        h = hashlib.sha1(self.image.tobytes())
        h.update(json.dumps([self.question, self.options]).encode())
        return h.hexdigest()


# -- drawing -----------------------------------------------------------------------------------
def _draw_shape(draw: ImageDraw.ImageDraw, shape: str, cx: float, cy: float, r: float,
                color: tuple[int, int, int]) -> None:
    box = [cx - r, cy - r, cx + r, cy + r]
    if shape == "square":
        draw.rectangle(box, fill=color)
    elif shape == "circle":
        draw.ellipse(box, fill=color)
    elif shape == "triangle":
        draw.polygon([(cx, cy - r), (cx + r, cy + r), (cx - r, cy + r)], fill=color)
    else:
        raise ValueError(f"unknown shape {shape!r}")


def _draw_arrow(draw: ImageDraw.ImageDraw, direction: str, cx: float, cy: float, r: float,
                color: tuple[int, int, int]) -> None:
    """A shaft and a triangular head pointing ``direction``."""
    dx, dy = _UNIT[direction]
    px, py = -dy, dx  # perpendicular
    tip = (cx + dx * r, cy + dy * r)
    base = (cx + dx * 0.1 * r, cy + dy * 0.1 * r)
    head = [tip, (base[0] + px * 0.7 * r, base[1] + py * 0.7 * r),
            (base[0] - px * 0.7 * r, base[1] - py * 0.7 * r)]
    w = 0.28 * r
    tail = (cx - dx * r, cy - dy * r)
    shaft = [(tail[0] + px * w, tail[1] + py * w), (base[0] + px * w, base[1] + py * w),
             (base[0] - px * w, base[1] - py * w), (tail[0] - px * w, tail[1] - py * w)]
    draw.polygon(shaft, fill=color)
    draw.polygon(head, fill=color)


_CLEARANCE = math.sqrt(2)  # a square or triangle of "radius" r reaches r·√2 from its centre


class _Canvas:
    """Places non-overlapping objects on a square canvas: anywhere (``cell`` 0), or one object
    per cell of a grid of ``cell``-pixel squares, jittered inside its cell."""

    def __init__(self, size: int, rng: random.Random, cell: int = 0):
        self.size, self.rng, self.cell = size, rng, cell
        self.image = Image.new("RGB", (size, size), BACKGROUND)
        self.draw = ImageDraw.Draw(self.image)
        self.placed: list[tuple[float, float, float]] = []
        self.used: set = set()
        self.objects: list[dict] = []  # what was drawn, for the text description

    def shape(self, shape: str, x: float, y: float, r: float, color: str) -> None:
        _draw_shape(self.draw, shape, x, y, r, COLORS[color])
        self.objects.append({"color": color, "shape": shape, "x": x, "y": y, "r": r})

    def arrow(self, direction: str, x: float, y: float, r: float, color: str) -> None:
        _draw_arrow(self.draw, direction, x, y, r, COLORS[color])
        self.objects.append({"color": color, "shape": "arrow", "x": x, "y": y, "r": r,
                             "direction": direction})

    def cell_of(self, x: float, y: float) -> tuple[int, int]:
        """(column, row) of the grid cell holding the point."""
        return int(x // self.cell), int(y // self.cell)

    def radius(self, lo_hi: tuple[float, float], arrow: bool = False) -> float:
        """A random size from fractions of half the image side; on a grid, capped so the shape
        (an arrow reaches r from its centre, other shapes r·√2) stays inside its cell."""
        r = self.rng.uniform(*lo_hi) * self.size / 2
        if self.cell:
            r = min(r, (self.cell / 2 - 1) / (1.0 if arrow else _CLEARANCE))
        return r

    def free_spot(self, r: float, tries: int = 200,
                  accept: Callable[[float, float], bool] | None = None) -> tuple[float, float]:
        """A centre for a shape of radius ``r`` inside the canvas, clear of every placed shape
        (and accepted by ``accept``); raises `_Retry` when none is found."""
        if self.cell:
            return self._free_cell(r, accept)
        for _ in range(tries):
            x = self.rng.uniform(r + 1, self.size - r - 1)
            y = self.rng.uniform(r + 1, self.size - r - 1)
            if all(math.hypot(x - a, y - b) > (r + c) * _CLEARANCE + 1 for a, b, c in self.placed) and (
                    accept is None or accept(x, y)):
                return x, y
        raise _Retry()

    def _free_cell(self, r, accept):
        n = self.size // self.cell
        cells = [(i, j) for i in range(n) for j in range(n) if (i, j) not in self.used]
        self.rng.shuffle(cells)
        slack = max(0.0, self.cell / 2 - 1 - r * _CLEARANCE)
        for i, j in cells:
            x = (i + 0.5) * self.cell + self.rng.uniform(-slack, slack)
            y = (j + 0.5) * self.cell + self.rng.uniform(-slack, slack)
            if accept is None or accept(x, y):
                return x, y
        raise _Retry()

    def add(self, x: float, y: float, r: float) -> None:
        self.placed.append((x, y, r))
        if self.cell:
            self.used.add((int(x // self.cell), int(y // self.cell)))


class _Retry(Exception):
    """The random layout did not fit; draw the scene again."""


def _canvas(cfg: "SyntheticConfig", rng: random.Random) -> _Canvas:
    return _Canvas(cfg.size, rng, cfg.cell if cfg.layout == "grid" else 0)


# -- tasks -------------------------------------------------------------------------------------
def _colors(rng: random.Random, k: int) -> list[str]:
    return rng.sample(list(COLORS), k)


def _distractors(canvas: _Canvas, rng: random.Random, colors: Sequence[str], n: int,
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


def _describe(canvas: _Canvas, rng: random.Random, sizes: bool = False) -> tuple[str, list]:
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
    canvas = _canvas(cfg, rng)
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
    canvas = _canvas(cfg, rng)
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
            raise _Retry()
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
            raise _Retry()
        centres.append((x, y))
    for i in sorted(range(n), key=lambda i: radii[i]):  # farthest first: closer shapes occlude
        canvas.shape(shapes[i], *centres[i], radii[i], colors[i])
    return canvas.image, question, names[0], names, colors[0]


def _egocentric(rng, cfg: SyntheticConfig):
    d = cfg.difficulty
    canvas = _canvas(cfg, rng)
    c_arrow, c_target, *rest = _colors(rng, 2 + min(d.distractors, 4))
    facing = rng.choice(DIRECTIONS)
    fx, fy = _UNIT[facing]
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
    return (canvas.image, question, _EGO_OPTIONS[where], list(_EGO_OPTIONS.values()), reasoning)


_EGO_OPTIONS = {"left": "on your left", "right": "on your right", "front": "in front of you",
                "behind": "behind you"}
_TURNS = {"90 degrees clockwise": 1, "90 degrees counterclockwise": -1, "180 degrees": 2}


def _mental_rotation(rng, cfg: SyntheticConfig):
    d = cfg.difficulty
    canvas = _canvas(cfg, rng)
    (color,) = _colors(rng, 1)
    start = rng.choice(DIRECTIONS)
    turn = rng.choice(list(_TURNS))
    end = DIRECTIONS[(DIRECTIONS.index(start) + _TURNS[turn]) % 4]
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
    canvas = _canvas(cfg, rng)
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


class _Decks:
    """Balanced answer positions: per option count, a shuffled deck of all positions."""

    def __init__(self, rng: random.Random):
        self.rng, self.decks = rng, defaultdict(list)

    def draw(self, n: int) -> int:
        deck = self.decks[n]
        if not deck:
            deck.extend(range(n))
            self.rng.shuffle(deck)
        return deck.pop()


def _canonical_order(task: str, choices: Sequence[str]) -> list[str]:
    """The task's fixed option order (`SyntheticConfig.option_order`): as the task lists its
    choices (left, right, above, below; up, right, down, left; counts ascending; on your left,
    right, in front, behind), shapes by their colour's place in `COLORS`."""
    if task == "depth_order":
        return sorted(choices, key=lambda name: list(COLORS).index(name.split()[1]))
    return list(choices)


def _make_item(task: str, rng: random.Random, cfg: SyntheticConfig, n: int, pos: int) -> Item:
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
        except _Retry:
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


def generate_split(count: int, seed: int, split: str, cfg: SyntheticConfig,
                   exclude: set | None = None) -> list[Item]:
    """``count`` items, tasks in round-robin order; deterministic in (count, seed, split, cfg).

    ``exclude``: signatures to avoid (the train split's, when generating test).
    """
    digest = hashlib.sha256(f"{seed}/{split}".encode()).digest()
    rng = random.Random(int.from_bytes(digest[:8], "big"))
    decks = _Decks(random.Random(rng.random()))
    exclude = exclude if exclude is not None else set()
    items: list[Item] = []
    for i in range(count):
        task = cfg.tasks[i % len(cfg.tasks)]
        n = cfg.options[rng.randrange(len(cfg.options))]
        pos = decks.draw(n)
        for _ in range(1000):
            item = _make_item(task, rng, cfg, n, pos)
            if item.signature() not in exclude:
                break
        else:  # pragma: no cover - needs an absurdly small scene space
            raise RuntimeError(f"{split}: could not draw a question outside the excluded set")
        exclude.add(item.signature())
        items.append(item)
    return items


def chance_levels(items: Sequence[Item]) -> dict[str, float]:
    """Expected accuracy of uniform guessing, per task and overall (mean of 1/#options), in %."""
    per: dict[str, list[float]] = defaultdict(list)
    for it in items:
        per[it.task].append(1.0 / len(it.options))
    out = {t: 100.0 * sum(v) / len(v) for t, v in per.items()}
    out["overall"] = 100.0 * sum(1.0 / len(it.options) for it in items) / max(1, len(items))
    return out


def chance_levels_of_release(release: str | Path) -> dict[str, float]:
    """`chance_levels` of a written split, from its ``data.json``."""
    rows = json.loads((Path(release) / "data.json").read_text(encoding="utf-8"))
    per: dict[str, list[float]] = defaultdict(list)
    for r in rows:
        per[r["synthetic_task"]].append(1.0 / len(r["options"]))
    out = {t: 100.0 * sum(v) / len(v) for t, v in per.items()}
    out["overall"] = 100.0 * sum(sum(v) for v in per.values()) / max(1, len(rows))
    return out


def _write_release(release: Path, items: Sequence[Item], cfg: SyntheticConfig) -> None:
    release.mkdir(parents=True, exist_ok=True)
    data = []
    for image_no, it in enumerate(items):
        task_type, sub = TASKS[it.task]
        path = release / task_type / f"{image_no}.png"
        path.parent.mkdir(parents=True, exist_ok=True)
        it.image.save(path)
        data.append({"id": f"{image_no}_0", "question": it.question, "options": it.options,
                     "answer": it.answer, "task_type": task_type, "sub_task_type": sub,
                     "synthetic_task": it.task, "difficulty": cfg.difficulty_name,
                     "reasoning": it.reasoning})
    tmp = release / "data.json.tmp"
    tmp.write_text(json.dumps(data, indent=1), encoding="utf-8")
    tmp.replace(release / "data.json")  # data.json last: its presence marks a finished split


def write_benchmark(out: str | Path, train: int, test: int, seed: int = 0,
                    cfg: SyntheticConfig | None = None) -> dict[str, dict[str, float]]:
    """Write both splits and ``README.md`` under ``out``; returns the chance levels per split."""
    cfg = cfg or SyntheticConfig()
    out = Path(out)
    seen: set = set()
    train_items = generate_split(train, seed, "train", cfg, seen)
    test_items = generate_split(test, seed, "test", cfg, set(seen))
    _write_release(out / "OmniSpatial-train", train_items, cfg)
    _write_release(out / "OmniSpatial-test", test_items, cfg)
    chance = {"train": chance_levels(train_items), "test": chance_levels(test_items)}
    (out / "README.md").write_text(_readme(cfg, seed, train_items, test_items, chance),
                                   encoding="utf-8")
    return chance


def _readme(cfg, seed, train_items, test_items, chance) -> str:
    letters = Counter("ABCD"[it.answer] for it in train_items + test_items)
    rows = "\n".join(f"| {t} | {TASKS[t][0]} / {TASKS[t][1]} | "
                     f"{sum(it.task == t for it in test_items)} | {chance['test'].get(t, 0):.1f}% |"
                     for t in cfg.tasks)
    return (f"# Synthetic spatial benchmark (seed {seed}, difficulty {cfg.difficulty_name})\n\n"
            f"Written by `python -m soft_spatial.data.synthetic`; OmniSpatial release layout.\n"
            f"Train {len(train_items)} questions, test {len(test_items)} (disjoint), images "
            f"{cfg.size}x{cfg.size} ({cfg.layout} layout"
            f"{', scene described in words' if cfg.describe else ''}), options per question "
            f"{list(cfg.options)} in {cfg.option_order} order.\n"
            f"Knobs: {json.dumps(asdict(cfg.difficulty))}.\n"
            f"Answer letters over both splits: {dict(sorted(letters.items()))}.\n\n"
            f"| task | OmniSpatial type | test questions | chance |\n|---|---|---|---|\n{rows}\n"
            f"| overall | | {len(test_items)} | {chance['test']['overall']:.1f}% |\n")


def corpus(repeat: int = 20) -> list[str]:
    """Texts a tokenizer for this benchmark should know as whole words: our system prompt, every
    question template, option and reasoning word, in the chat layout (``repeat`` times each, so a
    BPE trained on them merges these words first)."""

    words = (list(COLORS) + list(SHAPES) + list(DIRECTIONS) + list(_EGO_OPTIONS)
             + list(_EGO_OPTIONS.values()) + ["above", "below", "facing", "turned", "closest"]
             + [str(k) for k in range(10)] + [f"{c}. " for c in "ABCD"] + list(_TURNS)
             + [w for row in CELLS for w in row] + ["Scene:", "at", "pointing", "size", "sizes",
                                                     "largest", "arrow"])
    texts = [SYSTEM_PROMPT, "Where is the red square relative to the blue circle?",
             "Which shape is closest to the camera?",
             "Imagine you stand at the green arrow, facing the way it points. Where is the red "
             "circle?",
             "The blue arrow is turned 90 degrees clockwise in the picture plane. Which way does it "
             "point after the turn?", "How many yellow shapes are in the picture?",
             " ".join(words), "\n".join(words + ["system", "user", "assistant"]),
             "\n".join(f"{c}. {w}" for c, w in zip("ABCD", words)),
             "Scene: red square at northwest; green arrow at center, pointing north; blue "
             "circle at southeast, size 5."]
    return texts * repeat


def read_reasoning(release: str | Path) -> dict[str, dict]:
    """``{id: {"task", "reasoning"}}`` of a written split (its ``data.json``)."""
    rows = json.loads((Path(release) / "data.json").read_text(encoding="utf-8"))
    return {r["id"]: {"task": r["synthetic_task"], "reasoning": r["reasoning"]} for r in rows}


def main(argv: Sequence[str] | None = None) -> dict[str, dict[str, float]]:
    p = argparse.ArgumentParser(prog="python -m soft_spatial.data.synthetic",
                                description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, type=Path, help="output directory")
    p.add_argument("--train", type=int, default=2000, help="training questions")
    p.add_argument("--test", type=int, default=500, help="held-out questions")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--size", type=int, default=SyntheticConfig.size, help="image side (pixels)")
    p.add_argument("--tasks", default=",".join(TASKS), help="comma-separated subset of tasks")
    p.add_argument("--options", default="2,3,4", help="allowed option counts, e.g. 4 or 2,3,4")
    p.add_argument("--difficulty", choices=sorted(DIFFICULTIES), default="medium")
    p.add_argument("--layout", choices=("grid", "free"), default=SyntheticConfig.layout,
                   help="one object per grid cell, or anywhere")
    p.add_argument("--cell", type=int, default=SyntheticConfig.cell, help="grid cell (pixels)")
    p.add_argument("--option-order", choices=("shuffled", "canonical"), default="shuffled",
                   help="options in random order, or in one fixed order per task")
    p.add_argument("--describe", action="store_true",
                   help="start each question with the scene in words (needs a 3x3 grid)")
    for name in ("distractors", "max_count"):
        p.add_argument(f"--{name.replace('_', '-')}", type=int, default=None)
    for name in ("margin", "size_ratio"):
        p.add_argument(f"--{name.replace('_', '-')}", type=float, default=None)
    a = p.parse_args(argv)
    knobs = {k: getattr(a, k) for k in ("distractors", "max_count", "margin", "size_ratio")
             if getattr(a, k) is not None}
    cfg = SyntheticConfig(size=a.size, tasks=tuple(t for t in a.tasks.split(",") if t),
                          options=tuple(int(n) for n in a.options.split(",")),
                          difficulty=replace(DIFFICULTIES[a.difficulty], **knobs),
                          difficulty_name=a.difficulty + ("+" if knobs else ""),
                          layout=a.layout, cell=a.cell, describe=a.describe,
                          option_order=a.option_order)
    chance = write_benchmark(a.out, a.train, a.test, a.seed, cfg)
    print(f"{a.out}: {a.train} train + {a.test} test questions; chance on test: "
          + ", ".join(f"{k} {v:.1f}%" for k, v in chance["test"].items()))
    return chance


if __name__ == "__main__":
    main()
