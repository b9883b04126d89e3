"""Fails loudly when SGLang 0.5.12 (or verl's SGLang rollout) moves an internal soft_spatial
touches: every function of soft_spatial/compat/sglang.py and the SGLang-side functions of
soft_spatial/compat/verl.py, checked against the real modules.

    PYTHONPATH=.venv/sglang-cpu-overlay:tests/sglang_stubs .venv/bin/python -m pytest \
        tests/sglang_real/test_compat_sglang.py
"""
import pytest


def test_sglang_internals_we_touch_are_unchanged():
    from soft_spatial.compat import sglang

    assert sglang.check_internals() == []


def test_verl_sglang_rollout_internals_we_touch_are_unchanged():
    from soft_spatial.compat.verl import check_sglang_internals

    assert check_sglang_internals() == []


def test_check_internals_names_a_moved_sampler_method(monkeypatch):
    from sglang.srt.layers.sampler import Sampler

    from soft_spatial.compat import sglang

    monkeypatch.delattr(Sampler, "_sync_token_ids_across_tp")
    assert any("Sampler._sync_token_ids_across_tp" in p for p in sglang.check_internals())


def test_tensor_update_request_round_trips():
    """The request carries one serialized copy per TP worker that deserializes to the tensors."""
    import torch
    from sglang.srt.utils import MultiprocessingSerializer

    from soft_spatial.compat.sglang import tensor_update_request

    named = [("w", torch.arange(6, dtype=torch.uint8))]
    req = tensor_update_request(named, copies=2, load_format="a.b", flush_cache=False)
    assert (req.load_format, req.flush_cache, len(req.serialized_named_tensors)) == ("a.b", False, 2)
    for blob in req.serialized_named_tensors:
        (name, tensor), = MultiprocessingSerializer.deserialize(blob)
        assert name == "w" and torch.equal(tensor, named[0][1])


def test_version_check_rejects_another_version(monkeypatch):
    import sglang as sgl

    from soft_spatial.compat import sglang

    monkeypatch.setattr(sgl, "__version__", "0.0.1")
    with pytest.raises(ImportError, match="0.5.12"):
        sglang.check_version()
