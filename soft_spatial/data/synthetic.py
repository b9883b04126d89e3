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
(:mod:`soft_spatial.lab.learning.warmstart`) uses as the text inside ``<think>``.

Answer letters are balanced: for every option count the correct position cycles through a
shuffled deck of all positions. Scenes use a grid layout by default (one object per 32-pixel
cell, the tiny models' image tokens; ``--layout free`` places objects anywhere). Everything is a
pure function of (split, seed, knobs); the test split draws from its own random stream and any
test item whose image and question also occur in train is redrawn, so the splits are disjoint.
"""
from __future__ import annotations

import argparse
import functools
import hashlib
import itertools
import json
import math
import random
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from PIL import Image, ImageDraw

from soft_spatial.data.prompt import SYSTEM_PROMPT

__all__ = ["TASKS", "PATH_TASKS", "ALL_TASKS", "PathKnobs", "QUARTERS", "cell_name", "Difficulty",
           "DIFFICULTIES", "SyntheticConfig", "Item", "generate_split",
           "write_benchmark", "chance_levels", "chance_levels_of_release", "corpus",
           "path_shortcut_accuracy", "read_reasoning", "read_rows", "path_phrases", "main"]

#: task -> (OmniSpatial task_type, sub_task_type)
TASKS: dict[str, tuple[str, str]] = {
    "relative_position": ("Spatial_Interaction", "Localization"),
    "depth_order": ("Spatial_Interaction", "Geospatial_Strategy"),
    "egocentric": ("Perspective_Taking", "Egocentric"),
    "mental_rotation": ("Dynamic_Reasoning", "Manipulation"),
    "counting": ("Complex_Logic", "Pattern_Recognition"),
}
#: the ambiguous-start path tracking tasks (m = 1, 2, 3 candidate starts), never in the default
#: task list; each on an OmniSpatial sub-task no scene task uses, so per-sub-task is per-task
PATH_TASKS: dict[str, tuple[str, str]] = {
    "path_known": ("Dynamic_Reasoning", "Motion_Analysis"),
    "path_two": ("Spatial_Interaction", "Traffic_Analysis"),
    "path_three": ("Perspective_Taking", "Hypothetical"),
}
ALL_TASKS: dict[str, tuple[str, str]] = {**TASKS, **PATH_TASKS}
SUB_TASK_TO_TASK = {sub: task for task, (_, sub) in ALL_TASKS.items()}

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
class PathKnobs:
    """The path tasks' generator (see docs/learning.md, "Ambiguous-start path tracking").

    grid: board side in cells (even, so the quarters are clean); the image side must be a
    multiple of it. moves: D, compass moves per question. blocks: grey cells that stop the
    robot. window: the step t* at which the true path first enters the purple circle is drawn
    uniformly from this range (≥ 1 carried step before it, ≥ 1 after). pool_factor: candidates
    generated per kept question; the kept ones are chosen greedily so that letters, the true
    branch, t*, every audited shortcut and the answer within each multiset of moves are
    balanced. allow_merge: candidate paths may meet before t* (a harder variant)."""

    grid: int = 6
    moves: int = 8
    blocks: int = 2
    window: tuple[int, int] = (3, 6)
    pool_factor: int = 4
    allow_merge: bool = False

    def __post_init__(self):
        if self.grid not in (4, 6):
            raise ValueError(f"path grid must be 4 or 6, got {self.grid}")
        lo, hi = self.window
        if not 1 <= lo <= hi < self.moves:
            raise ValueError(f"path window {self.window} must lie inside 1..moves-1 ({self.moves})")
        if not 0 <= self.blocks <= 3:
            raise ValueError(f"path blocks must be 0..3, got {self.blocks}")
        if self.pool_factor < 1:
            raise ValueError(f"pool_factor must be >= 1, got {self.pool_factor}")


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
    paths: PathKnobs = field(default_factory=PathKnobs)

    def __post_init__(self):
        unknown = [t for t in self.tasks if t not in ALL_TASKS]
        if unknown or not self.tasks:
            raise ValueError(f"unknown synthetic tasks {unknown}; choose from {list(ALL_TASKS)}")
        if any(t in PATH_TASKS for t in self.tasks) and (
                self.size % self.paths.grid or self.size // self.paths.grid < 8):
            raise ValueError(f"the path tasks draw a {self.paths.grid}x{self.paths.grid} board: "
                             f"image size {self.size} must be a multiple of it, cells >= 8 pixels")
        if not self.options or any(n not in (2, 3, 4) for n in self.options):
            raise ValueError(f"option counts must be among 2, 3, 4; got {self.options}")
        if self.size < 32:
            raise ValueError(f"image size must be at least 32 pixels, got {self.size}")
        if self.layout not in ("grid", "free"):
            raise ValueError(f"layout must be 'grid' or 'free', got {self.layout!r}")
        if self.layout == "grid" and self.size // self.cell < 3 and any(t in TASKS for t in self.tasks):
            raise ValueError(f"a grid layout needs at least 3x3 cells: size {self.size} // cell "
                             f"{self.cell} < 3 (use layout='free' for small images)")
        scenes = any(t in TASKS for t in self.tasks)  # the path tasks draw their own board
        if scenes and self.describe and (self.layout != "grid" or self.size // self.cell != 3):
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
    extra: dict = field(default_factory=dict)  # more record fields (the path tasks')

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


# -- ambiguous-start path tracking (path_known, path_two, path_three) --------------------------
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
        _draw_shape(draw, "square", (x + 0.5) * c, (y + 0.5) * c, r, COLORS[color])
    x, y = scene.circle
    _draw_shape(draw, "circle", (x + 0.5) * c, (y + 0.5) * c, r, COLORS["purple"])
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


def _path_item(task: str, scene: _PathScene, cfg: "SyntheticConfig") -> "Item":
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


def _path_batch(task: str, count: int, seed: int, split: str, cfg: "SyntheticConfig",
                exclude: set) -> list["Item"]:
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
    decks = {"answer": _Decks(random.Random(rng.random())), "t": _Decks(random.Random(rng.random())),
             "branch": _Decks(random.Random(rng.random()))}
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


def generate_split(count: int, seed: int, split: str, cfg: SyntheticConfig,
                   exclude: set | None = None) -> list[Item]:
    """``count`` items, tasks in round-robin order; deterministic in (count, seed, split, cfg).

    ``exclude``: signatures to avoid (the train split's, when generating test).
    """
    digest = hashlib.sha256(f"{seed}/{split}".encode()).digest()
    rng = random.Random(int.from_bytes(digest[:8], "big"))
    decks = _Decks(random.Random(rng.random()))
    exclude = exclude if exclude is not None else set()
    slots = Counter(cfg.tasks[i % len(cfg.tasks)] for i in range(count))
    paths = {t: iter(_path_batch(t, slots[t], seed, split, cfg, exclude))
             for t in dict.fromkeys(cfg.tasks) if t in PATH_TASKS}  # their own random streams
    items: list[Item] = []
    for i in range(count):
        task = cfg.tasks[i % len(cfg.tasks)]
        if task in paths:
            items.append(next(paths[task]))
            continue
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
        task_type, sub = ALL_TASKS[it.task]
        path = release / task_type / f"{image_no}.png"
        path.parent.mkdir(parents=True, exist_ok=True)
        it.image.save(path)
        data.append({"id": f"{image_no}_0", "question": it.question, "options": it.options,
                     "answer": it.answer, "task_type": task_type, "sub_task_type": sub,
                     "synthetic_task": it.task, "difficulty": cfg.difficulty_name,
                     "reasoning": it.reasoning, **it.extra})
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
    rows = "\n".join(f"| {t} | {ALL_TASKS[t][0]} / {ALL_TASKS[t][1]} | "
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
            f"| overall | | {len(test_items)} | {chance['test']['overall']:.1f}% |\n"
            + _path_readme(cfg, train_items, test_items))


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


def _path_readme(cfg, train_items, test_items) -> str:
    if not any(t in PATH_TASKS for t in cfg.tasks):
        return ""
    acc = {"train": path_shortcut_accuracy(train_items), "test": path_shortcut_accuracy(test_items)}
    lines = [f"\nPath tasks: {json.dumps(asdict(cfg.paths))}. Audited shortcuts, accuracy % "
             f"(chance: 1/m for a start, 25 for a quarter):\n",
             "| split | task | " + " | ".join(n for n, _ in PATH_SHORTCUTS) + " |",
             "|---|---|" + "---|" * len(PATH_SHORTCUTS)]
    for split, per in acc.items():
        for task, row in per.items():
            lines.append(f"| {split} | {task} | " + " | ".join(
                f"{row[n]:.1f}" if n in row else "-" for n, _ in PATH_SHORTCUTS) + " |")
    return "\n".join(lines) + "\n"


def corpus(repeat: int = 20, tasks: Sequence[str] = ()) -> list[str]:
    """Texts a tokenizer for this benchmark should know as whole words: our system prompt, every
    question template, option and reasoning word, in the chat layout (``repeat`` times each, so a
    BPE trained on them merges these words first). With a path task among ``tasks``, also the
    path questions' words: the board's cell names, the moves, ``circle``, ``:`` and the quarters
    (without one, the texts are exactly those of the scene tasks)."""

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
    if any(t in PATH_TASKS for t in tasks):
        names = [cell_name((x, y)) for y in range(6) for x in range(6)]
        path_words = names + list(MOVES) + list(QUARTERS) + ["circle", ":", "grey", "block", "purple"]
        texts += [" ".join(path_words), "\n".join(path_words),
                  "Scene: red square at d2; green square at b1; purple circle at d1; grey block at "
                  "d4. A robot starts on one of the squares and moves east, north, south, west. "
                  "The border and grey blocks stop it. It passed over the purple circle. In which "
                  "quarter of the board is it now?",
                  "east c1 north c1 circle west b1 south b2 : b2 northwest",
                  "\n".join(f"{c}. {q}" for c, q in zip("ABCD", QUARTERS))]
    return texts * repeat


def path_phrases(tasks: Sequence[str] = (), grid: int = PathKnobs.grid) -> list[str]:
    """With a path task among ``tasks``, the board's cell names, each after a space (`` a1`` ..),
    to be added to a small BPE as whole tokens (``build_tiny_model(phrases=...)``): Qwen's
    pre-tokenizer splits every digit off, so no merge can make a cell one token, and the warm
    start's soft view needs each cell to be one candidate. Empty without a path task."""
    if not any(t in PATH_TASKS for t in tasks):
        return []
    return [" " + cell_name((x, y)) for y in range(grid) for x in range(grid)]


def read_rows(release: str | Path) -> dict[str, dict]:
    """``{id: row}``: every field of a written split's records (its ``data.json``), the path
    questions' ground truth (moves, branches, true branch, t*) included."""
    rows = json.loads((Path(release) / "data.json").read_text(encoding="utf-8"))
    return {r["id"]: r for r in rows}


def read_reasoning(release: str | Path) -> dict[str, dict]:
    """``{id: {"task", "reasoning"}}`` of a written split (its ``data.json``)."""
    return {k: {"task": r["synthetic_task"], "reasoning": r["reasoning"]}
            for k, r in read_rows(release).items()}


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
    p.add_argument("--grid", type=int, default=PathKnobs.grid, help="path tasks: board side")
    p.add_argument("--moves", type=int, default=PathKnobs.moves, help="path tasks: moves")
    p.add_argument("--blocks", type=int, default=PathKnobs.blocks, help="path tasks: grey blocks")
    p.add_argument("--pool-factor", type=int, default=PathKnobs.pool_factor,
                   help="path tasks: candidates generated per question kept")
    p.add_argument("--allow-merge", action="store_true",
                   help="path tasks: candidate paths may meet before the circle")
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
                          option_order=a.option_order,
                          paths=PathKnobs(grid=a.grid, moves=a.moves, blocks=a.blocks,
                                          pool_factor=a.pool_factor, allow_merge=a.allow_merge))
    chance = write_benchmark(a.out, a.train, a.test, a.seed, cfg)
    print(f"{a.out}: {a.train} train + {a.test} test questions; chance on test: "
          + ", ".join(f"{k} {v:.1f}%" for k, v in chance["test"].items()))
    return chance


if __name__ == "__main__":
    main()
