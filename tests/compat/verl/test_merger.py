"""verl's merger internals (soft_spatial/compat/verl/merger.py) are where the weights-only merge
expects them. What the merge does with them, on a real FSDP checkpoint and hostile shards, is
end to end: tests/e2e/test_export_safety.py and tests/e2e/test_hostile_pickles.py."""
import os


def test_what_the_weights_only_merge_relies_on_in_verl_is_unchanged():
    """soft_spatial/compat/verl/merger.py: verl's merger CLI, and its shard loads through the
    ``torch.load`` module attribute (tests/e2e/test_export_safety.py checks the behaviour)."""
    os.environ.setdefault("VERL_PLATFORM", "cpu")
    from soft_spatial.compat.verl.merger import check_merger

    assert check_merger() == []
