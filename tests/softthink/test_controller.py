"""AdaptSoft (docs/design.md §2.4, §2.5, §2.7): init, features, ablations, straight-through
replay."""

import io

import pytest
import torch

from soft_spatial.softthink import AdaptSoft, AdaptSoftConfig, ControllerState, normalized_entropy


def trained_like(ctrl, seed=0):
    """Give every parameter a non-zero value (as after some training)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in ctrl.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype) * 0.3)
    return ctrl


def test_tau_is_tau0_exactly_at_initialisation():
    ctrl = AdaptSoft(hidden_size=32)
    x = torch.randn(50, ctrl.feature_dim) * 10
    u = ctrl(x)
    assert torch.equal(u, torch.zeros(50))
    assert torch.equal(ctrl.temperature(u), torch.full((50,), 0.5))
    cfg = AdaptSoftConfig(tau0=0.7, delta=0.3)
    c2 = AdaptSoft.from_config(cfg, hidden_size=16)
    assert torch.all(c2.temperature(c2(torch.randn(4, c2.feature_dim))) == 0.7)


@pytest.mark.parametrize("tau0,delta", [(0.5, 0.5), (0.5, 0.6), (0.5, 0.0), (0.5, -0.1)])
def test_invalid_delta_raises(tau0, delta):
    with pytest.raises(ValueError, match="delta"):
        AdaptSoft(hidden_size=8, tau0=tau0, delta=delta)
    with pytest.raises(ValueError, match="delta"):
        AdaptSoftConfig(tau0=tau0, delta=delta)


def test_no_inputs_raises():
    with pytest.raises(ValueError, match="use_hidden"):
        AdaptSoft(hidden_size=8, use_hidden=False, use_entropy=False)


def test_tau_stays_in_range():
    ctrl = trained_like(AdaptSoft(hidden_size=8))
    tau = ctrl.temperature(ctrl(torch.randn(1000, ctrl.feature_dim) * 100))
    assert tau.min() > 0.1 - 1e-6 and tau.max() < 0.9 + 1e-6


def test_features_match_float64_reference():
    d = 24
    ctrl = AdaptSoft(hidden_size=d, entropy_mean=0.2, entropy_std=0.3, seed=5)
    h = torch.randn(3, 4, d) * 3 + 1
    logp = torch.log_softmax(torch.randn(3, 4, 5), -1)
    x = ctrl.features(h, logp)
    hd = h.double()
    ln = (hd - hd.mean(-1, keepdim=True)) / torch.sqrt(hd.var(-1, unbiased=False, keepdim=True)
                                                       + 1e-5)
    proj = ln @ ctrl.projection.double().T
    hs = (normalized_entropy(logp.double()) - 0.2) / (0.3 + 1e-6)
    ref = torch.cat([proj, hs[..., None]], -1)
    assert x.shape == (3, 4, 9)
    torch.testing.assert_close(x.double(), ref, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="hidden_size"):
        ctrl.features(torch.randn(2, d + 1), logp[0, :2])


def test_projection_is_fixed_seeded_and_in_state_dict():
    a, b, c = AdaptSoft(64, seed=1), AdaptSoft(64, seed=1), AdaptSoft(64, seed=2)
    assert torch.equal(a.projection, b.projection) and not torch.equal(a.projection, c.projection)
    assert "projection" in a.state_dict()
    assert all(n != "projection" for n, _ in a.named_parameters())
    # entries N(0, 1)/sqrt(D)
    big = AdaptSoft(4096, proj_dim=8)
    assert big.projection.std().item() == pytest.approx(1 / 64, rel=0.05)
    assert torch.equal(a.fc1.weight, b.fc1.weight)


@pytest.mark.parametrize("use_hidden,use_entropy", [(True, False), (False, True)])
def test_ablations_ignore_dropped_inputs(use_hidden, use_entropy):
    ctrl = trained_like(AdaptSoft(16, use_hidden=use_hidden, use_entropy=use_entropy))
    x = torch.randn(10, ctrl.feature_dim)
    x2 = x.clone()
    if use_hidden:
        x2[..., -1] += 3.0  # change only the entropy column
    else:
        x2[..., :-1] += 3.0  # change only the projected hidden state
    assert torch.equal(ctrl(x), ctrl(x2))
    x3 = x.clone()
    x3[..., 0 if use_hidden else -1] += 3.0
    assert not torch.equal(ctrl(x), ctrl(x3))


def test_replay_temperature_value_is_exact_and_gradient_is_straight_through():
    ctrl = trained_like(AdaptSoft(16, width=32).double(), seed=1)
    x = torch.randn(20, ctrl.feature_dim, dtype=torch.float64)
    u_roll = ctrl(x).detach() + torch.randn(20, dtype=torch.float64)  # rollout used older φ
    tau_roll = ctrl.temperature(u_roll)
    tau_upd = ctrl.replay_temperature(x, u_roll)
    assert torch.equal(tau_upd, tau_roll)  # forward value is the rollout's τ, bit for bit
    params = list(ctrl.parameters())
    w = torch.randn(20, dtype=torch.float64)
    g_st = torch.autograd.grad((w * tau_upd).sum(), params, allow_unused=True)
    # analytic: ∂τ_upd/∂φ = Δ(1 − tanh²(u_roll)) ∂ũ/∂φ
    coeff = ctrl.delta * (1 - torch.tanh(u_roll) ** 2)
    g_ref = torch.autograd.grad((w * coeff * ctrl(x)).sum(), params, allow_unused=True)
    for a, b in zip(g_st, g_ref):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


def test_controller_forward_gradcheck():
    ctrl = trained_like(AdaptSoft(8, width=16).double(), seed=2)
    x = torch.randn(6, ctrl.feature_dim, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: ctrl.temperature(ctrl(t)), (x,))
    # and w.r.t. a parameter via finite differences
    w1 = ctrl.fc1.weight
    (g,) = torch.autograd.grad(ctrl.temperature(ctrl(x.detach())).sum(), w1)
    eps = 1e-6
    for idx in [(0, 0), (3, 5), (15, 8)]:
        with torch.no_grad():
            w1[idx] += eps
            up = ctrl.temperature(ctrl(x.detach())).sum()
            w1[idx] -= 2 * eps
            dn = ctrl.temperature(ctrl(x.detach())).sum()
            w1[idx] += eps
        assert g[idx].item() == pytest.approx(((up - dn) / (2 * eps)).item(), rel=1e-6, abs=1e-9)


def test_save_load_round_trip(tmp_path):
    ctrl = trained_like(AdaptSoft(32, proj_dim=4, use_entropy=False, seed=9))
    path = tmp_path / "ctrl.pt"
    ctrl.save(path, extra={"step": 3})
    back = AdaptSoft.load(path)
    x = torch.randn(5, ctrl.feature_dim)
    assert torch.equal(back(x), ctrl(x)) and torch.equal(back.projection, ctrl.projection)
    assert back.use_entropy is False and torch.load(path, weights_only=True)["step"] == 3
    torch.save({"nope": 1}, tmp_path / "bad.pt")
    with pytest.raises(ValueError, match="bad.pt"):
        AdaptSoft.load(tmp_path / "bad.pt")


def test_unreadable_checkpoints_are_named(tmp_path):
    path = tmp_path / "ctrl.pt"
    AdaptSoft(32, proj_dim=4).save(path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ctrl.pt"]  # written through a temporary
    path.write_bytes(path.read_bytes()[:100])  # a copy cut short
    with pytest.raises(ValueError, match=r"ctrl\.pt: cannot read the AdaptSoft checkpoint"):
        AdaptSoft.load(path)
    with pytest.raises(FileNotFoundError, match="missing.pt"):
        AdaptSoft.load(tmp_path / "missing.pt")


def test_to_state_from_state_round_trip_and_reuse():
    """from_state(to_state()) rebuilds the controller; it loads in place into a controller built
    the same way and builds a new one for another config; the state's blob round-trips through
    torch.save / weights-only torch.load."""
    a, b = AdaptSoft(hidden_size=16, seed=1), AdaptSoft(hidden_size=16, seed=2)
    state = a.to_state()
    assert isinstance(state, ControllerState) and state.hidden_size == 16 and state.config == a.config
    assert all(v.device.type == "cpu" and not v.requires_grad for v in state.weights.values())
    rebuilt = AdaptSoft.from_state(state)
    assert rebuilt.config_dict() == a.config_dict()
    assert all(torch.equal(v, a.state_dict()[k]) for k, v in rebuilt.state_dict().items())
    same_cfg = AdaptSoft(hidden_size=16, seed=1)
    assert AdaptSoft.from_state(state, into=same_cfg) is same_cfg
    assert AdaptSoft.from_state(state, into=b) is not b  # the seed differs: a new controller
    assert AdaptSoft.from_state(state, into=AdaptSoft(hidden_size=32, seed=1)).hidden_size == 16
    buf = io.BytesIO()
    torch.save(state.to_blob(), buf)
    back = ControllerState.from_blob(torch.load(io.BytesIO(buf.getvalue()), weights_only=True))
    assert (back.hidden_size, back.config) == (state.hidden_size, state.config)
    assert back.weights.keys() == state.weights.keys()
    assert all(torch.equal(back.weights[k], v) for k, v in state.weights.items())
    with pytest.raises(TypeError, match="ControllerState"):
        AdaptSoft.from_state(dict(a.state_dict()))


@pytest.mark.parametrize("blob, message", [
    ([1, 2], "not an AdaptSoft state"),
    ({"config": {"hidden_size": 16}}, "not an AdaptSoft state"),
    ({"config": {"width": 8}, "state_dict": {}}, "hidden_size must be an int"),
    ({"config": {"hidden_size": 16, "tau0": 0.3, "delta": 0.4}, "state_dict": {}}, "delta"),
    ({"config": {"hidden_size": 16, "colour": 1}, "state_dict": {}}, "colour"),
    ({"config": {"hidden_size": 16}, "state_dict": {"fc1.weight": [1.0]}}, "not tensors"),
])
def test_a_blob_that_is_not_a_controller_state_is_named(blob, message):
    with pytest.raises(ValueError, match=message) as err:
        ControllerState.from_blob(blob, source="ckpt.pt")
    assert "ckpt.pt" in str(err.value)
