import pytest


@pytest.fixture(scope="session")
def two_rank_run(tiny_qwen3_text_small, tmp_path_factory):
    """The folder of the one two-rank gloo run shared by the FSDP2 update and resume tests
    (tests/support/actor_two_ranks.py)."""
    import actor_two_ranks

    out = tmp_path_factory.mktemp("two_ranks")
    actor_two_ranks.run(tiny_qwen3_text_small, out)
    return out
