"""`load_benchmark`, the one entry point over the three loaders: names, splits, and the gold letter
forms every loader reads alike. Each loader's own tests are in tests/data/test_<loader>.py."""

from __future__ import annotations

import json

import pytest

from soft_spatial.data import load_benchmark
from soft_spatial.data.fixtures import FixtureSet


@pytest.mark.parametrize("written", ["B", " b ", "B.", "(B)", "B)", "[b]", "Option B", "option: b", "Ｂ"])
def test_letter_answers_in_any_unambiguous_form(fx: FixtureSet, written):
    for path, field, loader in ((fx.mindcube / "raw" / "MindCube_tinybench.jsonl", "gt_answer", "mindcube"),
                                (fx.spatialab / "spatialab.jsonl", "answer", "spatialab")):
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        rows[0][field] = written
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        assert load_benchmark(loader, path.parent.parent if loader == "mindcube" else path)[0].answer == "B"


def test_load_benchmark_unknown_name(fx: FixtureSet):
    with pytest.raises(ValueError, match="unknown benchmark"):
        load_benchmark("vsibench", fx.root)
    with pytest.raises(ValueError, match="unknown MindCube split"):
        load_benchmark("mindcube", fx.mindcube, split="dev")
