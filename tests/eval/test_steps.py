"""soft_spatial.eval.steps: a sample's per-step arrays written to ``steps.jsonl`` and read back
exactly, the K candidates and their scores included; older rows (no candidates) still read; a
damaged row is refused naming its field."""
import json

import numpy as np
import pytest
import torch

from soft_spatial.eval.steps import decode_steps, read_steps, steps_row
from soft_spatial.softthink import SoftTrace


def _trace(n: int, k: int, seed: int) -> SoftTrace:
    g = torch.Generator().manual_seed(seed)
    soft = torch.rand(n, generator=g) < 0.6
    return SoftTrace(topk_ids=torch.randint(0, 151_936, (n, k), generator=g),
                     scores=torch.randn(n, k, generator=g, dtype=torch.float64),
                     tau=torch.rand(n, generator=g), u=torch.randn(n, generator=g),
                     ctrl_x=torch.randn(n, 9, generator=g), entropy=torch.rand(n, generator=g),
                     soft=soft)


@pytest.mark.parametrize("n, k, seed", [(1, 1, 0), (7, 5, 1), (33, 3, 2), (0, 5, 3)])
def test_a_row_round_trips_through_json(n, k, seed, tmp_path):
    tr = _trace(n, k, seed)
    row = json.loads(json.dumps(steps_row("omnispatial", 4, 2, tr)))
    got = decode_steps(row)
    np.testing.assert_array_equal(got["topk_ids"], tr.topk_ids.numpy().astype(np.int32))
    np.testing.assert_array_equal(got["scores"], tr.scores.numpy().astype(np.float32))
    np.testing.assert_array_equal(got["token"], tr.topk_ids[:, 0].numpy().astype(np.int32))
    np.testing.assert_array_equal(got["tau"], tr.tau.numpy().astype(np.float32))
    np.testing.assert_array_equal(got["soft"], tr.soft.numpy())
    assert got["topk_ids"].shape == got["scores"].shape == (n, k)
    path = tmp_path / "steps.jsonl"
    path.write_text(json.dumps(row) + "\n")
    assert set(read_steps(path)) == {("omnispatial", 4, 2)}


def test_a_row_written_before_the_candidates_still_reads():
    row = steps_row("mindcube", 0, 0, _trace(6, 4, 5))
    old = {key: v for key, v in row.items() if key not in ("k", "topk_ids", "scores")}
    got = decode_steps(old)
    assert set(got) == {"tau", "entropy", "token", "soft"} and got["tau"].shape == (6,)


@pytest.mark.parametrize("field, value, message", [
    ("k", 3, "field 'topk_ids' has 24 values, n × k = 6 × 3"),
    ("k", 0, "n × k = 6 × 0"),
    ("scores", "AAAAAA==", "field 'scores' has 1 values"),
])
def test_a_damaged_candidate_field_is_named(field, value, message):
    row = steps_row("omnispatial", 1, 0, _trace(6, 4, 7))
    row[field] = value
    with pytest.raises(ValueError, match=r"steps\.jsonl: record 3: undecodable arrays .*" + message):
        decode_steps(row, "steps.jsonl: record 3")


def test_a_row_missing_its_scores_names_the_field():
    row = steps_row("omnispatial", 1, 0, _trace(6, 4, 7))
    del row["scores"]
    with pytest.raises(ValueError, match="missing field 'scores'"):
        decode_steps(row)
