"""A split (soft_spatial/data/synthetic/split.py): answer letters balanced per option count, and a
test split that redraws every question that also occurs in train."""
from __future__ import annotations

from collections import Counter

from soft_spatial.data.synthetic import SyntheticConfig, generate_split


def test_answer_letters_are_balanced_per_option_count():
    items = generate_split(240, seed=5, split="train", cfg=SyntheticConfig())
    by_n = {}
    for it in items:
        by_n.setdefault(len(it.options), Counter())[it.answer] += 1
    assert set(by_n) == {2, 3, 4}
    for n, counts in by_n.items():
        assert set(counts) == set(range(n))
        assert max(counts.values()) - min(counts.values()) <= 1, (n, counts)


def test_test_split_redraws_items_that_occur_in_train():
    cfg = SyntheticConfig(tasks=("mental_rotation",), options=(4,), size=32, layout="free")
    train = generate_split(40, 0, "train", cfg)  # a small scene space: collisions happen
    seen = {i.signature() for i in train}
    test = generate_split(40, 0, "test", cfg, exclude=set(seen))
    assert not seen & {i.signature() for i in test}
