"""Drawing a scene: the palette, the shapes and arrows, and `Canvas`, which places non-overlapping
objects (one per grid cell, or anywhere) and remembers what it drew for the scene's description."""
from __future__ import annotations

import math
import random
from collections.abc import Callable

from PIL import Image, ImageDraw

from soft_spatial.data.synthetic.config import SyntheticConfig

COLORS: dict[str, tuple[int, int, int]] = {
    "red": (220, 40, 40), "green": (30, 160, 60), "blue": (40, 80, 230),
    "yellow": (235, 200, 30), "purple": (150, 50, 190), "orange": (245, 130, 20),
}
SHAPES = ("square", "circle", "triangle")
DIRECTIONS = ("up", "right", "down", "left")  # clockwise order, image coordinates (y down)
UNIT = {"up": (0, -1), "right": (1, 0), "down": (0, 1), "left": (-1, 0)}
BACKGROUND = (225, 225, 225)


def draw_shape(draw: ImageDraw.ImageDraw, shape: str, cx: float, cy: float, r: float,
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
    dx, dy = UNIT[direction]
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


class Canvas:
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
        draw_shape(self.draw, shape, x, y, r, COLORS[color])
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
        (and accepted by ``accept``); raises `Retry` when none is found."""
        if self.cell:
            return self._free_cell(r, accept)
        for _ in range(tries):
            x = self.rng.uniform(r + 1, self.size - r - 1)
            y = self.rng.uniform(r + 1, self.size - r - 1)
            if all(math.hypot(x - a, y - b) > (r + c) * _CLEARANCE + 1 for a, b, c in self.placed) and (
                    accept is None or accept(x, y)):
                return x, y
        raise Retry()

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
        raise Retry()

    def add(self, x: float, y: float, r: float) -> None:
        self.placed.append((x, y, r))
        if self.cell:
            self.used.add((int(x // self.cell), int(y // self.cell)))


class Retry(Exception):
    """The random layout did not fit; draw the scene again."""


def canvas_for(cfg: SyntheticConfig, rng: random.Random) -> Canvas:
    """A blank canvas for one scene of ``cfg``: its image side, on its grid or free."""
    return Canvas(cfg.size, rng, cfg.cell if cfg.layout == "grid" else 0)
