"""Tiny synthetic benchmark files in each real schema, for tests and demos (no download).

`write_fixtures(root)` writes::

    root/omnispatial/OmniSpatial-test/data.json + <task_type>/<image_no>.png   10 questions
    root/omnispatial/OmniSpatial-train/...                                      4 questions
    root/spatialab/spatialab.{jsonl,csv,parquet} + images/*.png                 6 questions each
    root/mindcube/raw/MindCube_tinybench.jsonl + other_all_image/...            6 questions

Every image is a 16x16 solid colour, distinct across the whole fixture, so tests can check which
image went where (`FixtureSet.colours` maps image paths to their colour).
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass, field
from pathlib import Path

from PIL import Image

from soft_spatial.data.images import png_bytes

SIZE = (16, 16)


@dataclass
class FixtureSet:
    """Where `write_fixtures` put things."""

    root: Path
    omnispatial: Path
    omnispatial_test: Path
    omnispatial_train: Path
    spatialab: Path
    mindcube: Path
    colours: dict[Path, tuple[int, int, int]] = field(default_factory=dict)


class _Palette:
    """Hands out distinct RGB colours and remembers which file got which."""

    def __init__(self) -> None:
        self.count = 0
        self.colours: dict[Path, tuple[int, int, int]] = {}

    def next(self) -> tuple[int, int, int]:
        self.count += 1
        n = self.count
        return ((n * 67) % 256, (n * 131 + 40) % 256, (n * 29 + 90) % 256)

    def png(self, path: Path) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        colour = self.next()
        Image.new("RGB", SIZE, colour).save(path)
        self.colours[path] = colour
        return path


# (id, task_type, sub_task_type, question, options, answer index)
OMNISPATIAL_TEST = [
    ("0_0", "Perspective_Taking", "Egocentric", "From the camera, is the lamp left or right of the sofa?",
     ["left", "right"], 1),
    ("0_1", "Perspective_Taking", "Allocentric", "Facing the window, which object is closest to your right hand?",
     ["the lamp", "the chair", "the plant", "the table"], 3),
    ("1_0", "Perspective_Taking", "Hypothetical", "If you stood behind the car, where would the tree be?",
     ["in front of you", "behind you", "to your left"], 0),
    ("2_0", "Dynamic_Reasoning", "Manipulation", "Which way must the handle turn to open the valve?",
     ["clockwise", "counter-clockwise", "push it in", "pull it out"], 2),
    ("3_0", "Dynamic_Reasoning", "Motion_Analysis", "Which ball will reach the bottom of the ramp first?",
     ["the red ball", "the blue ball", "both at once"], 1),
    ("4_0", "Spatial_Interaction", "Traffic_Analysis", "Which car has to yield at the crossing?",
     ["the white car", "the black car", "neither", "both"], 0),
    ("5_0", "Spatial_Interaction", "Localization", "Where is the key relative to the book?",
     ["on top", "underneath", "beside it", "inside it"], 3),
    ("6_0", "Spatial_Interaction", "Geospatial_Strategy", "Which route from the gate to the tower is shortest?",
     ["the river path", "the hill path"], 0),
    ("7_0", "Complex_Logic", "Pattern_Recognition", "Which tile completes the pattern?",
     ["tile 1", "tile 2", "tile 3"], 2),
    ("8_0", "Complex_Logic", "Geometric_Reasoning", "How many faces of the cube are hidden from view?",
     ["1", "2", "3", "4"], 2),
]

OMNISPATIAL_TRAIN = [
    ("0_0", "Dynamic_Reasoning", "Manipulation", "Which drawer opens towards the camera?",
     ["top", "middle", "bottom"], 0),
    ("0_1", "Dynamic_Reasoning", "Manipulation", "Which hand should hold the jar lid?",
     ["left", "right"], 1),
    ("1_0", "Perspective_Taking", "Egocentric", "Is the door to your left or right?",
     ["left", "right", "straight ahead", "behind"], 3),
    ("2_0", "Complex_Logic", "Geometric_Reasoning", "Which shape has the most edges?",
     ["triangle", "square", "hexagon", "circle"], 2),
]

SPATIALAB_CATEGORIES = [
    ("3D Geometry", "volume ordering", "Which box holds the most?", ["box 1", "box 2", "box 3", "box 4"], "A"),
    ("Depth & Occlusion", "layer order", "Which object is furthest back?", ["mug", "vase", "book", "lamp"], "B"),
    ("Orientation", "facing", "Which way does the chair face?", ["north", "south", "east", "west"], "C"),
    ("Relative Positioning", "left/right", "What is left of the bottle?",
     ["a cup", "a fork", "a plate", "a knife"], "D"),
    ("Size & Scale", "relative size", "Which ball is larger?", ["red", "blue", "green", "same size"], "A"),
    ("Spatial Navigation", "path existence", "Can the robot reach the door?",
     ["yes", "no", "only by the left", "only by the right"], "B"),
]

# (id, question with inline options, gt letter, number of views, type)
MINDCUBE = [
    ("among_group001_q0_1_1", "Based on these two views showing the same scene: in which direction did I move from "
     "the first view to the second view? A. Directly left B. Diagonally forward and right", "B", 2, "two_view"),
    ("among_group002_q1_2_0", "From the third view, which object is behind the sofa? A. the lamp B. the bag "
     "C. the plant D. nothing", "C", 4, "four_view"),
    ("around_scene003_q0", "After walking around the table, what is on your left? A. a chair B. a shelf "
     "C. a window", "A", 3, "three_view"),
    ("aroundnew_scene004_q2", "Which view was taken from the opposite side? A. view 1 B. view 2 C. view 3",
     "C", 3, "three_view"),
    ("rotation_scene005_q1", "I turned in place between the views. Which way did I turn? A. left 90 degrees "
     "B. right 90 degrees C. 180 degrees D. not at all", "D", 4, "four_view"),
    ("translation_scene006_q0", "Did I move forward or backward? A. forward B. backward", "A", 2, "two_view"),
]


def _write_omnispatial(release: Path, rows: list, palette: _Palette) -> None:
    release.mkdir(parents=True, exist_ok=True)
    data = []
    for record_id, task, sub, question, options, answer in rows:
        image = release / task / f"{record_id.split('_')[0]}.png"
        if not image.exists():
            palette.png(image)
        data.append({"id": record_id, "question": question, "options": options, "answer": answer,
                     "task_type": task, "sub_task_type": sub})
    (release / "data.json").write_text(json.dumps(data, indent=1), encoding="utf-8")


def _write_spatialab(root: Path, palette: _Palette) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    root.mkdir(parents=True, exist_ok=True)
    jsonl, csv_rows, parquet_rows = [], [], []
    for i, (category, sub, question, options, answer) in enumerate(SPATIALAB_CATEGORIES):
        image = palette.png(root / "images" / f"{i}.png")
        rel = image.relative_to(root).as_posix()
        base = {"id": f"sl_{i}", "question": question, "category": category, "subcategory": sub}
        # JSONL: list options, letter answers, image paths relative to the file
        jsonl.append({**base, "options": options, "answer": answer, "image": rel})
        # CSV: one column per option, 1-based index answers
        csv_rows.append({**base, **dict(zip("ABCD", options)), "answer": "ABCD".index(answer) + 1, "image": rel})
        # parquet: list options, letter answers, embedded image bytes (HF Image-feature struct)
        parquet_rows.append({**base, "options": options, "answer": answer,
                             "image": {"bytes": png_bytes(Image.open(image)), "path": None}})
    (root / "spatialab.jsonl").write_text("".join(json.dumps(r) + "\n" for r in jsonl), encoding="utf-8")
    header = ["id", "question", "A", "B", "C", "D", "answer", "category", "subcategory", "image"]
    with (root / "spatialab.csv").open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=header)
        writer.writeheader()
        writer.writerows(csv_rows)
    pq.write_table(pa.Table.from_pylist(parquet_rows), root / "spatialab.parquet")


def _write_mindcube(root: Path, palette: _Palette) -> None:
    lines = []
    for record_id, question, answer, n_views, kind in MINDCUBE:
        setting = record_id.split("_")[0].replace("aroundnew", "around")
        scene = record_id.split("_")[1]
        # names chosen so that sorting them would change the order: order must come from the list
        names = ("front", "left", "back", "right")[:n_views]
        views = [f"other_all_image/{setting}/{scene}/{name}.png" for name in names]
        for view in views:
            palette.png(root / view)
        lines.append({"id": record_id, "category": ["perpendicular", "self"], "type": kind,
                      "meta_info": [["object"], [None]], "question": question, "images": views, "gt_answer": answer})
    raw = root / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    (raw / "MindCube_tinybench.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines), encoding="utf-8")


def write_fixtures(root: str | Path) -> FixtureSet:
    """Write all fixtures under ``root`` (created if needed) and say where they are."""
    root = Path(root)
    palette = _Palette()
    omni = root / "omnispatial"
    _write_omnispatial(omni / "OmniSpatial-test", OMNISPATIAL_TEST, palette)
    _write_omnispatial(omni / "OmniSpatial-train", OMNISPATIAL_TRAIN, palette)
    _write_spatialab(root / "spatialab", palette)
    _write_mindcube(root / "mindcube", palette)
    return FixtureSet(
        root=root,
        omnispatial=omni,
        omnispatial_test=omni / "OmniSpatial-test",
        omnispatial_train=omni / "OmniSpatial-train",
        spatialab=root / "spatialab",
        mindcube=root / "mindcube",
        colours=palette.colours,
    )
