"""The benchmark's words for a tokenizer (soft_spatial/data/synthetic/vocabulary.py): the path
words only when a path task is asked for."""
from __future__ import annotations

import re

import pytest

from soft_spatial.data.synthetic import SyntheticConfig, corpus


def test_corpus_has_the_path_words_only_when_asked():
    assert corpus(repeat=1) == corpus(repeat=1, tasks=("counting",))
    text = " ".join(corpus(repeat=1, tasks=("path_two",)))
    for word in ("a1", "f6", "circle", "southeast", "north", "grey"):
        assert re.search(rf"\b{word}\b", text)
    with pytest.raises(ValueError, match="path tasks"):
        SyntheticConfig(size=100, tasks=("path_two",))
