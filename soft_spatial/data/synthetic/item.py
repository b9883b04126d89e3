"""One question before it is written (`Item`: image, question, options, answer, reasoning) and
`Decks`, the balanced answer positions every task draws its letters from."""
from __future__ import annotations

import hashlib
import json
import random
from collections import defaultdict
from dataclasses import dataclass, field

from PIL import Image


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


class Decks:
    """Balanced answer positions: per option count, a shuffled deck of all positions."""

    def __init__(self, rng: random.Random):
        self.rng, self.decks = rng, defaultdict(list)

    def draw(self, n: int) -> int:
        deck = self.decks[n]
        if not deck:
            deck.extend(range(n))
            self.rng.shuffle(deck)
        return deck.pop()
