"""Packs into device calls (scripts/gpu/gpukit/calls.py): the per-call budget beside the project
tree, and first-fit packing that completes the earliest packs first. (Splitting, the manifest in
every call and reassembly on the device: test_kit_install.py.)"""
from pathlib import Path

import kit_helpers  # noqa: F401  (scripts/gpu on the path)
import pytest

from gpukit import calls

MiB = 1 << 20


def test_call_budget_and_packing():
    assert calls.call_budget(2 * MiB) == 64 * MiB - 2 * MiB - calls.MARGIN
    with pytest.raises(SystemExit, match="leaves no room"):
        calls.call_budget(63 * MiB + 1)
    items = [(Path(f"f{i}"), size, prio) for i, (size, prio) in
             enumerate([(60, 1), (50, 0), (30, 0), (40, 1), (20, 2)])]
    grouped = calls.pack_calls(items, 100)
    sizes = {p.name: s for p, s, _ in items}
    assert all(sum(sizes[p.name] for p in c) <= 100 for c in grouped)
    assert [p.name for p in grouped[0]][:2] == ["f1", "f2"]  # the first pack's pieces come first
    assert sorted(p.name for c in grouped for p in c) == sorted(sizes)
    with pytest.raises(ValueError, match="exceeds a call's budget"):
        calls.pack_calls([(Path("big"), 101, 0)], 100)
