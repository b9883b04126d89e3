"""The output head in fp32 (soft_spatial.softthink.logits): the product against float64, under
autocast, with gradients; the dtype's spacing against frexp; and the variance of the candidate
log-prob change that rounding logits to bf16 causes, against real bf16 rounding."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from soft_spatial.softthink.logits import (fp32_head, fp32_linear, head_logits, rounding_delta_var,
                                           ulp)
from soft_spatial.softthink.mixture import renormalise


def _head(bias=False, dtype=torch.bfloat16):
    torch.manual_seed(0)
    head = nn.Linear(64, 500, bias=bias).to(dtype)
    with torch.no_grad():
        head.weight.normal_(0, 0.5)
    return head


@pytest.mark.parametrize("bias", [False, True])
def test_fp32_logits_are_the_exact_product_of_the_bf16_operands(bias):
    head = _head(bias)
    h = torch.randn(7, 64).bfloat16()
    want = torch.nn.functional.linear(h.double(), head.weight.double(),
                                      None if head.bias is None else head.bias.double())
    got, plain = head_logits(head, h, True), head_logits(head, h, False)
    assert got.dtype == torch.float32 and plain.dtype == torch.bfloat16
    assert (got.double() - want).abs().max() < 1e-4  # fp32 accumulation only
    assert (plain.double() - want).abs().max() > 1e-2  # bf16 output rounding: |ℓ| ~ 30
    assert torch.equal(plain, head(h))


def test_fp32_head_holds_under_autocast_and_passes_gradients():
    head = _head()
    h = torch.randn(3, 64, dtype=torch.bfloat16, requires_grad=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert head(h).dtype == torch.bfloat16
        with fp32_head(head):
            out = head(h)
        assert head(h).dtype == torch.bfloat16  # restored
    assert out.dtype == torch.float32 and "forward" not in head.__dict__
    torch.testing.assert_close(out, fp32_linear(head, h), rtol=0, atol=0)
    out.sum().backward()
    assert h.grad.dtype == torch.bfloat16 and head.weight.grad.dtype == torch.bfloat16
    torch.testing.assert_close(h.grad.float(), head.weight.float().sum(0).expand(3, -1),
                               rtol=1e-2, atol=1e-2)
    with pytest.raises(TypeError, match="linear output head"):
        with fp32_head(nn.ReLU()):
            pass
    with fp32_head(head), pytest.raises(RuntimeError, match="already replaced"):
        with fp32_head(head):
            pass
    assert "forward" not in head.__dict__


def test_ulp_is_the_spacing_of_the_dtype():
    """2^(e−1)·eps for x = m·2^e, m ∈ [0.5, 1) (frexp), and rounding to bf16 moves a number by at
    most half of it, with errors close to half occurring."""
    x = torch.cat([torch.tensor([1.0, 100.0, -100.0, 16.0, 0.3, 1e4]),
                   torch.randn(10000, dtype=torch.float64).float() * 40])
    m, e = torch.frexp(x)
    torch.testing.assert_close(ulp(x), torch.exp2(e.float() - 1) * 2.0 ** -7, rtol=0, atol=0)
    assert ulp(torch.tensor([100.0])).item() == 0.5 and ulp(torch.tensor([16.0])).item() == 0.125
    err = (x.bfloat16().float() - x).abs() / ulp(x)
    assert err.max() <= 0.5 and err.max() > 0.49
    assert ulp(torch.tensor([3.0]), torch.float32).item() == 2.0 ** -22


@pytest.mark.parametrize("temperature", [1.0, 0.6])
def test_the_rounding_variance_matches_real_bf16_rounding(temperature):
    """Candidate logits drawn continuously (several binades, a peaked and a flat step), each
    rounded to bf16 as a bf16 head's output is: the variance of the change of
    log softmax_C(ℓ/T) over many draws matches rounding_delta_var: within 2% where Δ is small,
    within 6% at |ℓ| ≈ 90 and T = 0.6 (Δ ≈ 0.2 nats RMS, where the first order starts to bend)."""
    g = torch.Generator().manual_seed(1)
    for centre, spread in ((20.0, 3.0), (90.0, 0.5), (3.0, 1.0)):
        base = centre + spread * torch.randn(1, 5, generator=g, dtype=torch.float64)
        ell = base + torch.rand(40000, 5, generator=g, dtype=torch.float64) * ulp(base).double()
        delta = renormalise(ell.float().bfloat16().double() / temperature) - renormalise(
            ell / temperature)
        want = rounding_delta_var(base.float(), temperature)[0].double()
        torch.testing.assert_close(delta.var(0), want, rtol=0.06, atol=0)
