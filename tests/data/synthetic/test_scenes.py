"""The five scene tasks (soft_spatial/data/synthetic/scenes.py): ground truth checked against the
rendered pixels (an independent reading of each image) and, described, against the words alone
(the benchmark's rules written out again here); the canonical option order with balanced letters."""
from __future__ import annotations

import re
from collections import Counter

import numpy as np
import pytest
from PIL import Image
from scipy import ndimage

from soft_spatial.data.synthetic import (COLORS, DIFFICULTIES, TASKS, Item, SyntheticConfig,
                                         generate_split)


def _mask(image: Image.Image, color: str) -> np.ndarray:
    return np.all(np.asarray(image.convert("RGB")) == np.array(COLORS[color]), axis=-1)


def _bbox(mask: np.ndarray):
    ys, xs = np.nonzero(mask)
    return xs.min(), xs.max(), ys.min(), ys.max()


def _centre(mask: np.ndarray):
    x0, x1, y0, y1 = _bbox(mask)
    return (x0 + x1) / 2, (y0 + y1) / 2


def _arrow_direction(mask: np.ndarray) -> str:
    """Which way an arrow points, read from its pixels: along its long axis, the half holding
    the wider part (the head) is the front."""
    x0, x1, y0, y1 = _bbox(mask)
    sub = mask[y0:y1 + 1, x0:x1 + 1]
    if sub.shape[0] >= sub.shape[1]:  # vertical: compare row widths of the two halves
        widths = sub.sum(1)
        half = len(widths) // 2
        return "up" if widths[:half].max() > widths[-half:].max() else "down"
    widths = sub.sum(0)
    half = len(widths) // 2
    return "left" if widths[:half].max() > widths[-half:].max() else "right"


def _colour_words(text: str):
    return [w for w in re.findall(r"[a-z]+", text) if w in COLORS]


def _pixel_answer(item: Item) -> str:
    """The correct option text, derived from the image and the question only."""
    img, q = item.image, item.question
    if item.task == "relative_position":
        a, b = _colour_words(q)
        (ax, ay), (bx, by) = _centre(_mask(img, a)), _centre(_mask(img, b))
        dx, dy = ax - bx, ay - by
        if abs(dx) >= abs(dy):
            return "right" if dx > 0 else "left"
        return "below" if dy > 0 else "above"
    if item.task == "depth_order":  # closer = larger; the closest is drawn on top, whole
        sizes = {}
        for option in item.options:
            (c,) = _colour_words(option)
            x0, x1, y0, y1 = _bbox(_mask(img, c))
            sizes[option] = max(x1 - x0, y1 - y0)
        return max(sizes, key=sizes.get)
    if item.task == "egocentric":
        arrow, target = _colour_words(q)
        facing = _arrow_direction(_mask(img, arrow))
        (ax, ay), (tx, ty) = _centre(_mask(img, arrow)), _centre(_mask(img, target))
        fx, fy = {"up": (0, -1), "right": (1, 0), "down": (0, 1), "left": (-1, 0)}[facing]
        fwd = (tx - ax) * fx + (ty - ay) * fy
        lat = (tx - ax) * -fy + (ty - ay) * fx
        if abs(lat) >= abs(fwd):
            return "on your right" if lat > 0 else "on your left"
        return "in front of you" if fwd > 0 else "behind you"
    if item.task == "mental_rotation":
        (c,) = _colour_words(q.split(" is turned")[0])
        start = _arrow_direction(_mask(img, c))
        turn = 1 if "90 degrees clockwise" in q else -1 if "counterclockwise" in q else 2
        order = ["up", "right", "down", "left"]
        return order[(order.index(start) + turn) % 4]
    if item.task == "counting":
        (c,) = _colour_words(q)
        _, n = ndimage.label(_mask(img, c))
        return str(n)
    raise AssertionError(item.task)


@pytest.mark.parametrize("layout,size", [("grid", 96), ("free", 64), ("grid", 128)])
@pytest.mark.parametrize("difficulty", ["easy", "medium", "hard"])
def test_ground_truth_matches_the_pixels(difficulty, layout, size):
    cfg = SyntheticConfig(size=size, layout=layout, difficulty=DIFFICULTIES[difficulty],
                          difficulty_name=difficulty)
    items = generate_split(150, seed=11, split="train", cfg=cfg)
    assert Counter(it.task for it in items) == {t: 30 for t in TASKS}
    for it in items:
        assert it.options[it.answer] == _pixel_answer(it), (it.task, it.question, it.options)
        assert 2 <= len(it.options) <= 4 and len(set(it.options)) == len(it.options)


_SCENE = re.compile(r"(?P<color>[a-z]+) (?P<shape>[a-z]+) at (?P<where>[a-z]+)"
                    r"(?:, pointing (?P<dir>[a-z]+))?(?:, size (?P<size>\d))?")
_SCREEN = {"north": "up", "east": "right", "south": "down", "west": "left"}


def _cell(where: str) -> tuple:
    """(column, row) of a compass word: north is the top row, west the left column."""
    row = 0 if where.startswith("north") else 2 if where.startswith("south") else 1
    col = 0 if where.endswith("west") else 2 if where.endswith("east") else 1
    return col, row


def _read_scene(question: str):
    """(objects from the ``Scene: ...`` sentence, the question after it)."""
    assert question.startswith("Scene: ")
    scene, rest = question[len("Scene: "):].split(". ", 1)
    objects = [_SCENE.fullmatch(part).groupdict() for part in scene.split("; ")]
    for o in objects:
        o["cell"] = _cell(o["where"])
        o["dir"] = _SCREEN.get(o["dir"], o["dir"])
    return objects, rest


def _text_answer(item: Item) -> str:
    """The correct option text from the words alone (the scene sentence and the question),
    with the benchmark's rules written out again here."""
    objects, q = _read_scene(item.question)
    named = {f"{o['color']} {o['shape']}": o for o in objects}
    if item.task == "relative_position":
        a, b = re.fullmatch(r"Where is the (\w+ \w+) relative to the (\w+ \w+)\?", q).groups()
        di = named[a]["cell"][0] - named[b]["cell"][0]
        dj = named[a]["cell"][1] - named[b]["cell"][1]
        assert abs(di) != abs(dj)  # the cells decide
        return ("right" if di > 0 else "left") if abs(di) > abs(dj) else (
            "below" if dj > 0 else "above")
    if item.task == "depth_order":
        sizes = {f"the {o['color']} {o['shape']}": int(o["size"]) for o in objects}
        top = max(sizes.values())
        assert list(sizes.values()).count(top) == 1
        return max(sizes, key=sizes.get)
    if item.task == "egocentric":
        arrow, target = re.search(r"at the (\w+) arrow.*Where is the (\w+ \w+)\?", q).groups()
        a, t = named[f"{arrow} arrow"], named[target]
        fx, fy = {"up": (0, -1), "right": (1, 0), "down": (0, 1), "left": (-1, 0)}[a["dir"]]
        dx, dy = t["cell"][0] - a["cell"][0], t["cell"][1] - a["cell"][1]
        fwd, lat = dx * fx + dy * fy, -dx * fy + dy * fx
        assert abs(fwd) != abs(lat)
        if abs(lat) > abs(fwd):
            return "on your right" if lat > 0 else "on your left"
        return "in front of you" if fwd > 0 else "behind you"
    if item.task == "mental_rotation":
        (o,) = objects
        turn = 1 if "90 degrees clockwise" in q else -1 if "counterclockwise" in q else 2
        order = ["up", "right", "down", "left"]
        return order[(order.index(o["dir"]) + turn) % 4]
    if item.task == "counting":
        (c,) = _colour_words(q)
        return str(sum(o["color"] == c for o in objects))
    raise AssertionError(item.task)


@pytest.mark.parametrize("difficulty", ["easy", "medium", "hard"])
def test_described_scenes_decide_the_answer_and_match_the_pixels(difficulty):
    """describe=True: the answer follows from the words alone, the pixels give the same answer,
    every described object is where (and, for arrows, points where) the words say, and the
    reasoning quotes the scene and ends with the answer."""
    cfg = SyntheticConfig(describe=True, difficulty=DIFFICULTIES[difficulty],
                          difficulty_name=difficulty)
    items = generate_split(150, seed=7, split="train", cfg=cfg)
    for it in items:
        objects, rest = _read_scene(it.question)
        assert it.options[it.answer] == _text_answer(it), (it.question, it.options)
        pixel_item = Item(it.task, it.image, rest, it.options, it.answer, it.reasoning)
        assert it.options[it.answer] == _pixel_answer(pixel_item), (it.question, it.options)
        pixels = np.asarray(it.image.convert("RGB"))
        drawn, n = ndimage.label(np.any(pixels != np.array([225, 225, 225]), axis=-1))
        assert n == len(objects)  # the scene lists every object drawn
        for o in objects:
            x, y = o["cell"]
            cell = pixels[y * 32:(y + 1) * 32, x * 32:(x + 1) * 32]
            assert np.all(cell == np.array(COLORS[o["color"]]), axis=-1).any(), (o, it.question)
            if o["dir"]:
                mask = np.zeros(pixels.shape[:2], bool)
                mask[y * 32:(y + 1) * 32, x * 32:(x + 1) * 32] = np.all(
                    cell == np.array(COLORS[o["color"]]), axis=-1)
                assert _arrow_direction(mask) == o["dir"]
        answer_word = {"on your left": "left", "on your right": "right", "in front of you": "front",
                       "behind you": "behind"}.get(it.options[it.answer], it.options[it.answer])
        assert it.reasoning.endswith(": " + answer_word.removeprefix("the ").split()[0])
        if it.task != "depth_order":  # (its options name the scene's shapes)
            # no option word is in the scene, and the reasoning names one: the answer, so a
            # reader matching its answer against the prompt finds it among the options only
            words = set(re.findall(r"\w+", " ".join(it.options)))
            assert not words & set(re.findall(r"\w+", it.question.split(". ")[0])), it.question
            assert len(words & set(re.findall(r"\w+", it.reasoning))) == len(
                answer_word.split()), (it.reasoning, it.options)
    with pytest.raises(ValueError, match="3x3 cells"):
        SyntheticConfig(describe=True, size=128)


@pytest.mark.parametrize("describe", [False, True])
def test_canonical_option_order_is_fixed_per_task_with_balanced_letters(describe):
    cfg = SyntheticConfig(option_order="canonical", describe=describe)
    items = generate_split(300, seed=9, split="train", cfg=cfg)
    fixed = {"relative_position": ["left", "right", "above", "below"],
             "mental_rotation": ["up", "right", "down", "left"],
             "egocentric": ["on your left", "on your right", "in front of you", "behind you"]}
    by_n = {}
    for it in items:
        truth = _text_answer(it) if describe else _pixel_answer(it)
        assert it.options[it.answer] == truth, (it.question, it.options)
        if it.task in fixed:  # the options keep the task's one order
            assert it.options == [o for o in fixed[it.task] if o in it.options]
        elif it.task == "counting":
            assert it.options == sorted(it.options, key=int)
            if len(it.options) == 4:
                assert it.options == ["1", "2", "3", "4"]
        else:
            ranks = [list(COLORS).index(o.split()[1]) for o in it.options]
            assert ranks == sorted(ranks)
        by_n.setdefault(len(it.options), Counter())[it.answer] += 1
    for n, counts in by_n.items():
        assert set(counts) == set(range(n)) and max(counts.values()) - min(counts.values()) <= 1
    with pytest.raises(ValueError, match="option_order"):
        SyntheticConfig(option_order="sorted")
