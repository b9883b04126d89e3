"""AdaptSoft's training inside the actor: τ-gradient of L_AS vs finite differences (float64),
gradient separation (θ only from GRPO, φ only from alignment), a 2-rank FSDP2/gloo update, and
the checkpoint round trip."""
import copy
from functools import partial

import pytest
import torch

import actor_helpers as H  # noqa: E402


@pytest.fixture(scope="module")
def adaptsoft_rollout(tiny_qwen3_text_small):
    ctrl = H.trained_controller(64)
    _, prompts, outs, _ = H.rollouts(tiny_qwen3_text_small, mode="adaptsoft", controller=ctrl)
    assert any(o.trace.soft.any() for o in outs) and any((~o.trace.soft).any() for o in outs)
    return ctrl, prompts, outs


# -- 1. τ-gradient through a tiny transformer vs finite differences (float64, no FSDP) ----------
def _forward(model, td, sb, tau):
    from verl.workers.utils.padding import build_attention_mask_from_nested

    from soft_spatial.actor.replay_layout import scatter_rows as _scatter
    from soft_spatial.softthink.replay import soft_inputs

    b, s = sb.embed_shape
    ids = torch.nested.to_padded_tensor(td["input_ids"], 0, output_size=(b, s))
    attn = build_attention_mask_from_nested(td["input_ids"], s)
    pos = torch.nested.to_padded_tensor(td["position_ids"], 0, output_size=(b, s))
    cap = {}
    handle = model.get_output_embeddings().register_forward_pre_hook(
        lambda m, a: cap.__setitem__("h", a[0]))
    def at_inputs(values):
        return _scatter(sb.embed_shape, sb.embed_rows, values)

    try:
        with soft_inputs(model.get_input_embeddings(), at_inputs(torch.ones_like(sb.soft_mask)),
                         at_inputs(sb.topk_ids),
                         # fp64 scores: the mixture then runs in fp64 (fp32 would round τ ± ε)
                         at_inputs(sb.scores.double()), at_inputs(tau), at_inputs(sb.soft_mask)):
            out = model(input_ids=ids, attention_mask=attn, position_ids=pos, use_cache=False)
    finally:
        handle.remove()
    logits = out.logits.reshape(-1, out.logits.shape[-1]).index_select(0, sb.logit_rows)
    hid = cap["h"].reshape(-1, cap["h"].shape[-1]).index_select(0, sb.logit_rows)
    return logits, hid


def _rmsnorm_in_input_dtype(model):
    """HF's RMSNorm computes in fp32 whatever the input dtype; for a float64 finite-difference
    check, compute it in the input dtype (same formula)."""
    import types

    def forward(self, x):
        var = x.pow(2).mean(-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(var + self.variance_epsilon))

    n = 0
    for m in model.modules():
        if type(m).__name__.endswith("RMSNorm") and hasattr(m, "variance_epsilon"):
            m.forward = types.MethodType(forward, m)
            n += 1
    assert n


def test_tau_gradient_of_alignment_loss_matches_finite_differences(adaptsoft_rollout,
                                                                   tiny_qwen3_text_small):
    from soft_spatial.actor.adaptsoft_trainer import AdaptSoftTrainer
    from soft_spatial.actor.replay_layout import ReplayState, trace_layout
    from soft_spatial.models import load_model
    from soft_spatial.softthink import (SparseGrad, alignment_loss, alignment_scores,
                                        step_likelihood)

    ctrl, prompts, outs = adaptsoft_rollout
    model, _, _ = load_model(tiny_qwen3_text_small, dtype=torch.float64)
    _rmsnorm_in_input_dtype(model)
    td = H.verl_batch(prompts, outs)
    s = int(td["input_ids"].offsets().diff().max())
    sb = trace_layout(td, remove_padding=False, input_len=s, temperature=1.0)
    trainer = AdaptSoftTrainer(copy.deepcopy(ctrl), seed=3)
    _, tau_upd, _ = trainer.replay_tau(sb.ctrl_x, sb.u, sb.soft_mask, sb.tau)
    leaf = tau_upd.detach().double().requires_grad_(True)
    logits, hid = _forward(model, td, sb, leaf)
    adv = torch.tensor([1.0, -0.5, 0.7, -1.2], dtype=torch.float64)
    lik = step_likelihood(logits, sb.topk_ids, sb.scores.double(), sb.soft_mask)
    loss = -(adv[sb.seq] * lik.loglik).mean()
    state = ReplayState(batch=sb, likelihood=lik, hidden_steps=hid, tau_leaf=leaf, tau_upd=tau_upd)
    trainer.alignment_step(loss, state)
    last = trainer.last
    g = last.g_tau
    assert g.dtype == torch.float64

    # the same objective with d, R, G_ref and κ frozen at the base point, as a function of τ
    (d,) = torch.autograd.grad(loss, logits, retain_graph=True)
    in_ref = last.ref_seq[sb.seq]
    ref_s, ref_d, opt = in_ref & sb.soft_mask, in_ref & ~sb.soft_mask, ~in_ref & sb.soft_mask
    assert opt.any() and in_ref.any()
    ids_o, ids_r = sb.topk_ids[opt], sb.topk_ids[ref_s]
    d_o = SparseGrad(ids_o, d[opt].gather(1, ids_o))
    d_ref = [SparseGrad(ids_r, d[ref_s].gather(1, ids_r)), d[ref_d]]
    v_ref = [hid[ref_s].detach(), hid[ref_d].detach()]
    kappa = last.kappa

    def objective(tau):
        with torch.no_grad():
            _, h = _forward(model, td, sb, tau)
            return alignment_loss(alignment_scores(d_o, h[opt], d_ref, v_ref), kappa)

    eps = 1e-6
    checked = 0
    for j in opt.nonzero().flatten()[:6].tolist():
        e = torch.zeros_like(leaf)
        e[j] = eps
        fd = (objective(leaf.detach() + e) - objective(leaf.detach() - e)) / (2 * eps)
        torch.testing.assert_close(g[j], fd, rtol=1e-5, atol=1e-9 * kappa)
        checked += 1
    assert checked and g[opt].abs().max() > 0
    assert (g[in_ref] == 0).all()  # reference rollouts are constants of the objective


# -- 2. θ only from GRPO, φ only from alignment ---------------------------------------------
def _grads(train_engine, td, loss_fn):
    """θ's and φ's gradients after one forward/backward (read before the train context zeroes
    them on exit)."""
    train_engine.optimizer_zero_grad()
    with train_engine.train_mode():
        train_engine.forward_backward_batch(td, loss_fn, forward_only=False)
        theta = {n: p.grad.full_tensor().clone() for n, p in train_engine.module.named_parameters()
                 if p.grad is not None}
        phi = None
        if train_engine.adaptsoft is not None:
            phi = [None if p.grad is None else p.grad.clone()
                   for p in train_engine.adaptsoft.controller.parameters()]
    assert theta
    return theta, phi


def test_theta_gets_only_grpo_and_phi_only_alignment(process_group, adaptsoft_rollout,
                                                     tiny_qwen3_text_small):
    from soft_spatial.actor.adaptsoft_trainer import AdaptSoftTrainer
    from soft_spatial.actor.loss import soft_ppo_loss
    from soft_spatial.softthink import AlignmentConfig, controller_surrogate

    ctrl, prompts, outs = adaptsoft_rollout
    loss_fn = partial(soft_ppo_loss, config=H.actor_config())
    train_engine = H.make_train_engine(tiny_qwen3_text_small)
    td = H.train_batch_td(train_engine, prompts, outs, micro_batch_size=4)  # one micro-batch
    base, _ = _grads(train_engine, copy.copy(td), loss_fn)

    trainer = AdaptSoftTrainer(copy.deepcopy(ctrl), seed=1)
    train_engine.configure_soft(adaptsoft=trainer)
    aligned, got = _grads(train_engine, copy.copy(td), loss_fn)
    assert base.keys() == aligned.keys()
    for n in base:
        torch.testing.assert_close(aligned[n], base[n], rtol=0, atol=0)
    # φ's gradient is exactly the alignment surrogate's
    last = trainer.last
    assert all(g is not None for g in got)
    probe = copy.deepcopy(trainer.controller)
    tau = probe.replay_temperature(last.ctrl_x, last.u)
    want = torch.autograd.grad(controller_surrogate(last.g_centered, tau),
                               list(probe.parameters()), allow_unused=True)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, torch.zeros_like(a) if b is None else b)
    assert any(g.abs().sum() > 0 for g in got)

    # ablation: no alignment -> φ gets the GRPO loss's own gradient through τ; θ unchanged
    ablation = AdaptSoftTrainer(copy.deepcopy(ctrl), AlignmentConfig(enabled=False))
    train_engine.adaptsoft = ablation
    ablated, phi_grpo = _grads(train_engine, copy.copy(td), loss_fn)
    for n in base:
        torch.testing.assert_close(ablated[n], base[n], rtol=0, atol=0)
    assert any(g is not None and g.abs().sum() > 0 for g in phi_grpo)
    train_engine.adaptsoft = None


@pytest.mark.parametrize("ablation", ["no_hidden", "no_entropy", "no_centering"])
def test_ablations_that_keep_alignment_train_the_controller(process_group, tiny_qwen3_text_small,
                                                            ablation):
    """Table 4's input and centring ablations through the real actor update (their presets compose
    into these settings: tests/e2e/test_train_cpu.py; the full method runs end to end there)."""
    from soft_spatial.actor.adaptsoft_trainer import AdaptSoftTrainer
    from soft_spatial.actor.loss import soft_ppo_loss
    from soft_spatial.softthink import AdaptSoft, AlignmentConfig, center_per_rollout

    ctrl = AdaptSoft(hidden_size=64, width=32, seed=3, use_hidden=ablation != "no_hidden",
                     use_entropy=ablation != "no_entropy")
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():  # random (non-initial) weights, so τ varies by step
        for p in ctrl.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.5)
    _, prompts, outs, _ = H.rollouts(tiny_qwen3_text_small, mode="adaptsoft", controller=ctrl)
    train_engine = H.make_train_engine(tiny_qwen3_text_small)
    td = H.train_batch_td(train_engine, prompts, outs, micro_batch_size=4)
    trainer = AdaptSoftTrainer(copy.deepcopy(ctrl), AlignmentConfig(center=ablation != "no_centering"),
                               seed=1)
    train_engine.configure_soft(adaptsoft=trainer)
    _, phi = _grads(train_engine, td, partial(soft_ppo_loss, config=H.actor_config()))
    last = trainer.last
    assert last.alpha.abs().sum() > 0 and any(p.abs().sum() > 0 for p in phi if p is not None)
    g_tau = last.g_tau.to(last.g_centered.dtype)
    raw = torch.where(last.soft_mask, g_tau, torch.zeros_like(g_tau))
    if ablation == "no_centering":  # the surrogate uses the raw τ-gradients of the soft steps
        torch.testing.assert_close(last.g_centered, raw)
    else:  # centred over the soft steps of each rollout (center_per_rollout's own tests: alignment)
        assert not torch.allclose(last.g_centered, raw)
        torch.testing.assert_close(last.g_centered, center_per_rollout(g_tau, last.seq, last.soft_mask))
    # the ablated input does not move the controller's output: perturb it in the recorded features
    if ablation != "no_centering":
        x = last.ctrl_x.clone()
        y = x.clone()
        y[:, slice(0, -1) if ablation == "no_hidden" else slice(-1, None)] += 1.0
        c = trainer.controller
        torch.testing.assert_close(c(y), c(x))
        z = x.clone()
        z[:, slice(-1, None) if ablation == "no_hidden" else slice(0, -1)] += 1.0
        assert not torch.allclose(c(z), c(x))  # while the kept input does
    train_engine.adaptsoft = None


def test_trainer_checkpoint_round_trip(tmp_path):
    from soft_spatial.actor.adaptsoft_trainer import AdaptSoftTrainer

    a = AdaptSoftTrainer(H.trained_controller(64, seed=2))
    for p in a.controller.parameters():
        p.grad = torch.ones_like(p)
    a.step()
    a.scaler.update(torch.tensor([0.5, -0.25]))
    a.save(tmp_path / "adaptsoft.pt")
    b = AdaptSoftTrainer(H.trained_controller(64, seed=5))
    b.load(tmp_path / "adaptsoft.pt")
    for (n, x), (_, y) in zip(a.controller.state_dict().items(), b.controller.state_dict().items()):
        assert torch.equal(x, y), n  # incl. the fixed projection P
    assert b.scaler.m == a.scaler.m and b.steps == a.steps == 1
    sa, sb_ = a.optimizer.state_dict()["state"], b.optimizer.state_dict()["state"]
    assert all(torch.equal(sa[k]["exp_avg"], sb_[k]["exp_avg"]) for k in sa)


class _RunsCode:
    """A pickle that runs code when loaded: it writes a file (what a crafted checkpoint could do)."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_a_crafted_controller_checkpoint_runs_no_code_on_resume(tmp_path):
    """Resuming loads ``global_step_N/actor/adaptsoft.pt``, a file that may come from elsewhere:
    a pickle that would run code is refused, and the code never runs."""
    import pickle

    from soft_spatial.actor.adaptsoft_trainer import AdaptSoftTrainer
    marker, path = tmp_path / "ran", tmp_path / "adaptsoft.pt"
    good = AdaptSoftTrainer(H.trained_controller(64, seed=2)).state_dict()
    torch.save(dict(good, controller_config=_RunsCode(marker)), path)
    with pytest.raises(pickle.UnpicklingError):
        AdaptSoftTrainer(H.trained_controller(64, seed=2)).load(path)
    assert not marker.exists()


@pytest.mark.parametrize("keep", [0, 40, -8])
def test_a_truncated_controller_checkpoint_is_named(tmp_path, keep):
    """A truncated ``adaptsoft.pt`` (a full disk, a partial copy) gave a bare RuntimeError or
    ``OSError: [Errno 22]`` inside a Ray worker: now a ValueError naming the file, which training
    raises before Ray starts (tests/test_train.py)."""
    from soft_spatial.actor.adaptsoft_trainer import AdaptSoftTrainer, read_state
    path = tmp_path / "adaptsoft.pt"
    trainer = AdaptSoftTrainer(H.trained_controller(64, seed=2))
    trainer.save(path)
    assert read_state(path)["steps"] == trainer.steps
    path.write_bytes(path.read_bytes()[:keep])
    with pytest.raises(ValueError, match=f"{path}: not a whole AdaptSoft checkpoint"):
        AdaptSoftTrainer(H.trained_controller(64, seed=2)).load(path)
    torch.save({"steps": 1}, path)  # another file under its name
    with pytest.raises(ValueError, match=f"{path}: not an AdaptSoft checkpoint \\(no controller_config"):
        read_state(path)


# -- 3. 2-rank FSDP2/gloo actor update with soft replay --------------------------------------
def test_two_rank_fsdp2_update_keeps_controllers_equal(two_rank_run):
    """Each rank (tests/support/actor_two_ranks.py, _fsdp_body) rolls out, takes its half of 4
    sequences and runs one FSDP2 train_batch with AdaptSoft: the controllers stay equal."""
    r0, r1 = (torch.load(two_rank_run / "fsdp" / f"rank{r}.pt", weights_only=False) for r in (0, 1))
    torch.testing.assert_close(r0["gathered"][0], r0["gathered"][1], rtol=0, atol=0)
    assert r0["changed"] and r1["changed"]
    assert r0["grad_norm"] == pytest.approx(r1["grad_norm"])
    assert r0["metrics"]["adaptsoft/grad_finite"] == [1.0]  # verl: a list per micro-batch


def test_trainer_device_zero_is_the_first_gpu_not_the_cpu():
    """device=0 (verl's get_device_id() on local rank 0) must place the controller on cuda:0;
    it once fell back to the CPU (``device or "cpu"``) and the first GPU update crashed."""
    from soft_spatial.actor.adaptsoft_trainer import AdaptSoftTrainer
    from soft_spatial.softthink import AdaptSoft

    assert AdaptSoftTrainer(AdaptSoft(16)).controller.fc1.weight.device.type == "cpu"
    if torch.cuda.is_available():
        assert AdaptSoftTrainer(AdaptSoft(16), device=0).controller.fc1.weight.device.index == 0
    else:
        with pytest.raises((RuntimeError, AssertionError)):  # no CUDA here: must not be the CPU
            AdaptSoftTrainer(AdaptSoft(16), device=0)


@pytest.mark.parametrize("switch,timed", [(None, False), ("0", False), ("1", True)])
def test_alignment_clock_is_opt_in(monkeypatch, switch, timed):
    """``actor/adaptsoft/alignment_s`` (two device syncs per micro-batch) only with
    ``SOFT_SPATIAL_ALIGNMENT_CLOCK=1``; the alignment's own metrics either way."""
    from soft_spatial.actor.train_engine import ALIGNMENT_CLOCK_ENV, SoftFSDPEngine

    if switch is None:
        monkeypatch.delenv(ALIGNMENT_CLOCK_ENV, raising=False)
    else:
        monkeypatch.setenv(ALIGNMENT_CLOCK_ENV, switch)
    steps = []

    class Trainer:
        def alignment_step(self, loss, state, group=None):
            steps.append(state)
            return {"adaptsoft/kappa": 2.0}

    engine = SoftFSDPEngine.__new__(SoftFSDPEngine)  # only the loss wrapper runs: no model
    engine.adaptsoft, engine._soft_state = Trainer(), {"micro": 0}
    loss, metrics = engine._loss_with_alignment(
        lambda model_output, data, dp_group: (torch.tensor(1.5), {"actor/pg_loss": 1.5}), None, None)
    assert steps == [{"micro": 0}] and loss.item() == 1.5
    assert metrics["adaptsoft/kappa"] == 2.0 and metrics["actor/pg_loss"] == 1.5
    assert ("adaptsoft/alignment_s" in metrics) == timed
    if timed:
        assert metrics["adaptsoft/alignment_s"] >= 0.0
