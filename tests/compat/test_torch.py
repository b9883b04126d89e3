"""soft_spatial/compat/torch.py: what it touches (``torch.tensor``, a module attribute) is there and
callable, the block refuses only a tensor made on another device, and the original comes back,
also after an error."""
import pytest
import torch

from soft_spatial.compat.torch import refuse_tensor_to_device


def test_the_block_refuses_a_device_tensor_and_restores_torch_tensor():
    original = torch.tensor
    assert callable(original)
    with refuse_tensor_to_device("blocking copy"):
        assert torch.tensor is not original
        assert torch.equal(torch.tensor([1, 2]), original([1, 2]))
        assert torch.tensor([1.0], device="cpu").device.type == "cpu"
        with pytest.raises(RuntimeError, match="blocking copy"):
            torch.tensor([1.0], device="meta")
    assert torch.tensor is original
    with pytest.raises(ValueError):
        with refuse_tensor_to_device("x"):
            raise ValueError("inside")
    assert torch.tensor is original
