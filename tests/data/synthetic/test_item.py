"""One question (soft_spatial/data/synthetic/item.py): its signature tells questions apart by
image, question and options; the decks give every answer position equally often, per option count."""
from __future__ import annotations

import random
from collections import Counter

from PIL import Image

from soft_spatial.data.synthetic.item import Decks, Item


def test_every_position_once_per_round_of_each_option_count():
    decks, rng = Decks(random.Random(0)), random.Random(1)
    drawn: dict[int, list[int]] = {2: [], 3: [], 4: []}
    for _ in range(120):  # the option counts interleaved, as a split draws them
        n = rng.choice([2, 3, 4])
        drawn[n].append(decks.draw(n))
    for n, seq in drawn.items():
        full = len(seq) - len(seq) % n
        for start in range(0, full, n):
            assert sorted(seq[start:start + n]) == list(range(n)), (n, seq)
        assert max(Counter(seq).values()) - min(Counter(seq).values()) <= 1
    rounds = {tuple(drawn[4][i:i + 4]) for i in range(0, len(drawn[4]) - 3, 4)}
    assert len(rounds) > 1  # each round shuffled anew, not one fixed order


def test_signature_tells_image_question_and_options_apart():
    image = Image.new("RGB", (8, 8), (225, 225, 225))
    item = Item("counting", image, "How many?", ["1", "2"], 0, "1")
    same = Item("counting", image.copy(), "How many?", ["1", "2"], 1, "other reasoning")
    assert item.signature() == same.signature()
    dot = image.copy()
    dot.putpixel((3, 3), (0, 0, 0))
    for other in (Item("counting", dot, "How many?", ["1", "2"], 0, "1"),
                  Item("counting", image, "How many red?", ["1", "2"], 0, "1"),
                  Item("counting", image, "How many?", ["2", "1"], 0, "1")):
        assert other.signature() != item.signature()
