"""Loads tests/support/barrier.py at interpreter start-up in a child whose PYTHONPATH holds this directory
(``barrier.arm(..., site=True)``); without the barrier's variables it does nothing."""
import os

if os.environ.get("SOFT_SPATIAL_TEST_BARRIER"):
    import barrier  # noqa: F401  (tests/support/ is on PYTHONPATH beside this directory)
