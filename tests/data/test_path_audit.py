"""The path tasks' audits (soft_spatial/data/path_audit.py) at tiny sizes: the heuristics against
scenes worked out by hand, the hard ceiling's simulation against its closed form where the
closed form holds, and the learned probes finding a planted leak and no leak in random labels.
The audits applied to the generator: tests/data/synthetic/test_paths.py."""
from __future__ import annotations

import json
import random

import pytest
import torch

from soft_spatial.data.path_audit import (HEURISTICS, AuditRow, PathScene, StartProbe, _candidate_tensor,
                                          audit, ceiling_formula, commit_and_track,
                                          commit_track_then_clamped, heuristic_hits, leak_profile,
                                          leaks, lookahead_features, order_free_features,
                                          main, shuffled_truth)
from soft_spatial.data.synthetic import SyntheticConfig, write_benchmark

MOVES = ("north", "east", "south", "west")


def _scene(starts, circle, moves, true_branch=0, blocks=(), answer=None):
    s = PathScene(tuple(starts), circle, frozenset(blocks), tuple(moves), true_branch, 0)
    if answer is None:
        answer = s.quarter(s.walks[true_branch][-1])
    return PathScene(s.starts, circle, s.blocks, s.moves, true_branch, answer)


def test_walks_bumps_and_the_clamped_estimate_by_hand():
    # a1 = (0, 0): north bumps the border at once; c3 = (2, 2) walks freely, then hits the block
    s = _scene([(0, 0), (2, 2)], (3, 1), ["north", "east", "east", "north"], blocks=[(4, 1)])
    assert s.walks[0] == ((0, 0), (0, 0), (1, 0), (2, 0), (2, 0))
    assert s.walks[1] == ((2, 2), (2, 1), (3, 1), (3, 1), (3, 0))  # east into the block at (4, 1)
    assert [s.first_bump(0), s.first_bump(1)] == [1, 3]
    assert s.clamped_end(0) == (2, 0) and s.clamped_end(1) == (4, 0)  # (0,0)+(2,-2), (2,2)+(2,-2)
    assert s.quarter((2, 2)) == 0 and s.quarter((3, 2)) == 1 and s.quarter((2, 3)) == 2
    never = _scene([(2, 2)], (3, 3), ["east", "west"])
    assert never.first_bump(0) == 3  # len(moves) + 1


def test_the_heuristics_on_a_scene_worked_out_by_hand():
    # start 1 (b2) enters the circle c2 at move 1 and then bumps against the top border (true);
    # start 0 (e5) never bumps before move 3
    s = _scene([(4, 4), (1, 1)], (2, 1), ["east", "north", "north", "west"], true_branch=1)
    assert s.walks[1] == ((1, 1), (2, 1), (2, 0), (2, 0), (1, 0))
    assert s.first_bump(1) == 3 and s.first_bump(0) == 5
    hits = {name: fn(s) for name, (_, _, fn) in HEURISTICS.items()}
    assert hits["earliest_bump"] == 1.0 and hits["first_move_bump"] == 0.5  # nobody bumps first
    assert hits["commit_earliest_bump_track"] == 1.0  # commits to start 1, which meets the circle
    # a random commit: start 1 right; start 0 misses the circle and guesses among 3 quarters
    assert commit_and_track(s, [0, 1]) == pytest.approx((1 + 1 / 3) / 2)


def test_after_a_miss_the_best_strategy_answers_the_other_starts_clamped_quarter():
    # start 0 bumps first (north at the border) but is wrong; start 1 is true
    s = _scene([(0, 0), (4, 3)], (4, 2), ["north", "west", "west"], true_branch=1)
    assert s.first_bump(0) == 1 and s.circle in s.walks[1][1:] and s.circle not in s.walks[0][1:]
    own = s.quarter(s.walks[0][-1])
    assert commit_and_track(s, [0]) == pytest.approx((own != s.answer) / 3)
    right = s.quarter(s.clamped_end(1)) == s.answer
    assert commit_track_then_clamped(s) == float(right)


def _random_scene(rng: random.Random, m: int) -> PathScene:
    cells = [(x, y) for x in range(6) for y in range(6)]
    picked = rng.sample(cells, m + 3)
    moves = [rng.choice(MOVES) for _ in range(8)]
    return _scene(picked[:m], picked[m], moves, rng.randrange(m), blocks=picked[m + 1:])


def test_a_random_commit_gives_the_closed_form_ceiling_where_its_premises_hold():
    """1/m + (1 − 1/m)/3 needs: the true path meets the circle, no wrong one does, and no wrong
    one ends in the answer's quarter. On scenes built that way the simulation gives it exactly."""
    rng = random.Random(3)
    checked = 0
    for _ in range(3000):
        s = _random_scene(rng, rng.choice([2, 3]))
        meets = [s.circle in w[1:] for w in s.walks]
        ends = [s.quarter(w[-1]) for w in s.walks]
        if meets[s.true_branch] and sum(meets) == 1 and ends.count(s.answer) == 1:
            assert commit_and_track(s, range(s.m)) * 100 == pytest.approx(ceiling_formula(s.m))
            checked += 1
    assert checked > 20


def test_the_features_withhold_the_order_and_lookahead_adds_the_first_moves():
    rng = random.Random(0)
    s = _random_scene(rng, 2)
    reordered = PathScene(s.starts, s.circle, s.blocks, tuple(reversed(s.moves)), s.true_branch,
                          s.answer)
    assert order_free_features(s, 0) == order_free_features(reordered, 0)
    base = len(order_free_features(s, 0))
    one, two = lookahead_features(s, 0, 1), lookahead_features(s, 0, 2)
    assert len(two) - len(one) == len(one) - base == 4 + 1 + 11 + 11
    assert one[base + 4] == float(s.walks[0][1] == s.walks[0][0])  # the first move's bump flag
    assert one[base:base + 4].index(1.0) == MOVES.index(s.moves[0])


def test_a_start_probe_finds_a_planted_leak_and_none_in_random_labels():
    rng = random.Random(1)
    scenes = [_random_scene(rng, 2) for _ in range(1400)]
    # planted: the true start is the one further west (ties dropped)
    planted = [PathScene(s.starts, s.circle, s.blocks, s.moves,
                         int(s.starts[1][0] < s.starts[0][0]), s.answer)
               for s in scenes if s.starts[0][0] != s.starts[1][0]]
    for labelled, lo, hi in ((planted, 90, 100), (scenes, 45, 55)):
        x, mask = _candidate_tensor(labelled[:800], order_free_features)
        tx, tmask = _candidate_tensor(labelled[800:], order_free_features)
        probe = StartProbe(x.shape[-1]).fit(x, mask, torch.tensor([s.true_branch for s in labelled[:800]]))
        acc = probe.accuracy(tx, tmask, torch.tensor([s.true_branch for s in labelled[800:]]))
        assert lo <= acc <= hi, acc
    assert probe(tx[:3], tmask[:3]).shape == (3, 3)
    assert torch.isinf(probe(tx[:3], tmask[:3])[:, 2]).all()  # the padded third candidate


def test_audit_rows_levels_and_what_counts_as_a_leak():
    rng = random.Random(2)
    scenes = [_random_scene(rng, m) for m in (1, 2, 3) for _ in range(60)]
    rows = audit(scenes[::2], scenes[1::2], probes=("order_free_start",))
    names = {(r.audit, r.m) for r in rows}
    assert ("earliest_bump", 1) not in names and ("earliest_bump", 2) in names
    assert ("order_free_start", 1) not in names and ("order_free_start", 3) in names
    assert {r.level for r in rows if r.audit == "earliest_bump"} == {50.0, 100 / 3}
    assert all(r.n == 30 for r in rows)
    hits = heuristic_hits([s for s in scenes if s.m == 2])
    assert hits["clamped_true"][1] == 25.0
    flagged = [AuditRow("clamped_true", 1, 80.0, 25.0, 10), AuditRow("clamped_true", 2, 80.0, 25.0, 10),
               AuditRow("earliest_bump", 2, 55.0, 50.0, 10), AuditRow("earliest_bump", 3, 38.4, 100 / 3, 10)]
    assert [(r.audit, r.m) for r in leaks(flagged)] == [("clamped_true", 2), ("earliest_bump", 3)]


def test_shuffled_truth_and_the_leak_profile():
    rng = random.Random(4)
    scenes = [_random_scene(rng, 2) for _ in range(200)]
    control = shuffled_truth(scenes, seed=1)
    assert [c.starts for c in control] == [s.starts for s in scenes]
    assert all(c.answer == c.quarter(c.walks[c.true_branch][-1]) for c in control)
    assert 0.35 < sum(c.true_branch for c in control) / len(control) < 0.65
    profile = leak_profile(scenes)[2]
    true_first = 100 * sum(s.first_bump(s.true_branch) == 1 for s in scenes) / len(scenes)
    assert profile["true_first_move_bump"] == pytest.approx(true_first)


def test_the_command_audits_a_written_benchmark_and_refuses_a_missing_one(tmp_path, capsys):
    cfg = SyntheticConfig(size=192, tasks=("path_known", "path_two", "path_three"), describe=True)
    write_benchmark(tmp_path / "b", 24, 12, seed=0, cfg=cfg)
    rows = main([str(tmp_path / "b"), "--json", str(tmp_path / "a.json"), "--steps", "3"])
    out = capsys.readouterr().out
    assert "| earliest_bump | - | " in out and "true_first_move_bump" in out
    assert "audits more than 5 points above their level" in out
    saved = json.loads((tmp_path / "a.json").read_text())
    assert [r["audit"] for r in saved] == [r.audit for r in rows] and {r["n"] for r in saved} == {4}
    with pytest.raises(SystemExit):
        main([str(tmp_path / "missing")])
    assert "missing/OmniSpatial-train/data.json does not exist" in capsys.readouterr().err
