"""verl's rollout internals (soft_spatial/compat/verl/rollout.py): an adapter registered under a
backend name is the class verl's ``get_rollout_class`` returns. (A replica's server fields:
tests/rollout/test_replica.py; the SGLang weight-sync internals: tests/sglang_real/test_verl_server.py.)"""
import os

os.environ.setdefault("VERL_PLATFORM", "cpu")


def test_register_rollout_adapter():
    from verl.workers.rollout.base import get_rollout_class

    from soft_spatial.compat.verl.rollout import register_rollout_adapter

    register_rollout_adapter("compat_test_backend",
                             "soft_spatial.rollout.replica.LocalSoftServerAdapter")
    from soft_spatial.rollout.replica import LocalSoftServerAdapter

    assert get_rollout_class("compat_test_backend", "async") is LocalSoftServerAdapter
