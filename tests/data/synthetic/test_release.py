"""The benchmark on disk (soft_spatial/data/synthetic/release.py): the release layout read by the
real OmniSpatial loader, byte-identical by seed, disjoint splits, chance levels (from the items
and from a written split) and the difficulty knobs."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from soft_spatial.data import load_benchmark
from soft_spatial.data.omnispatial import TAXONOMY
from soft_spatial.data.synthetic import (DIFFICULTIES, TASKS, SyntheticConfig, chance_levels,
                                         chance_levels_of_release, generate_split, read_reasoning,
                                         write_benchmark)


@pytest.fixture(scope="module")
def bench(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("synthetic")
    write_benchmark(out, train=60, test=40, seed=3)
    return out


def test_release_layout_reads_through_the_omnispatial_loader(bench):
    for split, n in (("train", 60), ("test", 40)):
        records = load_benchmark("omnispatial", bench, split)
        assert len(records) == n
        for r in records:
            assert r.subcategory in TAXONOMY[r.category]
            assert Path(r.images[0]).is_file() and 2 <= len(r.options) <= 4
            assert r.answer in r.letters
    raw = json.loads((bench / "OmniSpatial-test" / "data.json").read_text())
    assert {r["synthetic_task"] for r in raw} == set(TASKS)
    assert {(r["task_type"], r["sub_task_type"]) for r in raw} == set(TASKS.values())
    reasoning = read_reasoning(bench / "OmniSpatial-test")
    assert set(reasoning) == {r["id"] for r in raw}
    assert (bench / "README.md").read_text().count("|") > 20


def test_deterministic_by_seed_and_disjoint_splits(tmp_path):
    a, b, c = (tmp_path / x for x in "abc")
    write_benchmark(a, 30, 20, seed=1)
    write_benchmark(b, 30, 20, seed=1)
    write_benchmark(c, 30, 20, seed=2)
    for split in ("OmniSpatial-train", "OmniSpatial-test"):
        assert (a / split / "data.json").read_bytes() == (b / split / "data.json").read_bytes()
        pngs = sorted((a / split).rglob("*.png"))
        assert pngs and all(p.read_bytes() == (b / p.relative_to(a)).read_bytes() for p in pngs)
    assert (a / "OmniSpatial-test/data.json").read_bytes() != (
        c / "OmniSpatial-test/data.json").read_bytes()
    cfg = SyntheticConfig()
    train = generate_split(30, 1, "train", cfg)
    test = generate_split(20, 1, "test", cfg)
    assert not {i.signature() for i in train} & {i.signature() for i in test}


def test_chance_levels_and_knobs(bench):
    items = generate_split(40, 0, "test", SyntheticConfig(options=(4,)))
    assert chance_levels(items) == pytest.approx({**{t: 25.0 for t in TASKS}, "overall": 25.0})
    release = chance_levels_of_release(bench / "OmniSpatial-test")
    raw = json.loads((bench / "OmniSpatial-test" / "data.json").read_text())
    assert release["overall"] == pytest.approx(100 * np.mean([1 / len(r["options"]) for r in raw]))
    hard = generate_split(50, 0, "train", SyntheticConfig(tasks=("counting",), difficulty=DIFFICULTIES["hard"]))
    easy = generate_split(50, 0, "train", SyntheticConfig(tasks=("counting",), difficulty=DIFFICULTIES["easy"]))
    assert max(int(i.options[i.answer]) for i in hard) > max(int(i.options[i.answer]) for i in easy)
    with pytest.raises(ValueError, match="unknown synthetic tasks"):
        SyntheticConfig(tasks=("juggling",))
    with pytest.raises(ValueError, match="option counts"):
        SyntheticConfig(options=(5,))
