"""A split: ``count`` questions, tasks in round-robin order, letters balanced, none in the excluded
set (the train split's, when drawing test); and its chance levels."""
from __future__ import annotations

import hashlib
import random
from collections import Counter, defaultdict
from collections.abc import Sequence

from soft_spatial.data.synthetic.config import PATH_TASKS, SyntheticConfig
from soft_spatial.data.synthetic.item import Decks, Item
from soft_spatial.data.synthetic.paths import path_batch
from soft_spatial.data.synthetic.scenes import make_item


def generate_split(count: int, seed: int, split: str, cfg: SyntheticConfig,
                   exclude: set | None = None) -> list[Item]:
    """``count`` items, tasks in round-robin order; deterministic in (count, seed, split, cfg).

    ``exclude``: signatures to avoid (the train split's, when generating test).
    """
    digest = hashlib.sha256(f"{seed}/{split}".encode()).digest()
    rng = random.Random(int.from_bytes(digest[:8], "big"))
    decks = Decks(random.Random(rng.random()))
    exclude = exclude if exclude is not None else set()
    slots = Counter(cfg.tasks[i % len(cfg.tasks)] for i in range(count))
    paths = {t: iter(path_batch(t, slots[t], seed, split, cfg, exclude))
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
            item = make_item(task, rng, cfg, n, pos)
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
