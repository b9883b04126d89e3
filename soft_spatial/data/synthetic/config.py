"""What to generate: the tasks (each on its OmniSpatial type), the difficulty knobs, the path tasks'
generator knobs and `SyntheticConfig`, which holds them all; each knob's default once, with its
explanation. A config that cannot be drawn is refused here, before anything is generated."""
from __future__ import annotations

from dataclasses import dataclass, field

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
#: OmniSpatial sub_task_type -> task (one task per sub-task, so per-sub-task accuracy is per-task)
SUB_TASK_TO_TASK = {sub: task for task, (_, sub) in ALL_TASKS.items()}


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
