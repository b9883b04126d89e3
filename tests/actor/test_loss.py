"""The registered soft_grpo policy loss and the actor loss_fn, against independent formulas."""
import os

os.environ.setdefault("VERL_PLATFORM", "cpu")
# the plugin's registrations, the CPU platform first: a verl import elsewhere in this process (any
# test module collected after this one) would otherwise find "cpu" selected but unknown
from soft_spatial.plugin import register  # noqa: E402

register()

import pytest  # noqa: E402
import torch  # noqa: E402


def actor_config(**kw):
    from verl.workers.config import ActorConfig, PolicyLossConfig

    cfg = ActorConfig(strategy="fsdp", ppo_micro_batch_size_per_gpu=1, rollout_n=1,
                      use_kl_loss=True, kl_loss_type="low_var_kl", kl_loss_coef=1e-3,
                      clip_ratio=0.2, policy_loss=PolicyLossConfig(loss_mode="soft_grpo"), **kw)
    return cfg


def data(b=3, r=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    old = -torch.rand(b, r, generator=g, dtype=torch.float64) * 5
    new = old + torch.randn(b, r, generator=g, dtype=torch.float64) * 0.5
    ref = old + torch.randn(b, r, generator=g, dtype=torch.float64) * 0.3
    adv = torch.randn(b, 1, generator=g, dtype=torch.float64).expand(b, r).clone()
    mask = torch.ones(b, r, dtype=torch.bool)
    mask[0, 3:] = False
    return old, new, ref, adv, mask


def test_registered_and_equals_clipped_surrogate():
    from verl.trainer.ppo.core_algos import get_policy_loss_fn

    import soft_spatial.actor.loss as L

    fn = get_policy_loss_fn("soft_grpo")
    assert fn is L.soft_grpo_policy_loss
    old, new, _, adv, mask = data()
    new = new.requires_grad_(True)
    cfg = actor_config()
    loss, metrics = fn(old, new, adv, mask, "token-mean", cfg)
    rho = torch.exp(new - old)
    ref = torch.maximum(-adv * rho, -adv * rho.clamp(0.8, 1.2))[mask].mean()
    torch.testing.assert_close(loss, ref)
    assert {"actor/pg_clipfrac", "actor/ppo_kl"} <= set(metrics)
    loss.backward()
    assert torch.isfinite(new.grad).all() and (new.grad[~mask] == 0).all()


def test_matches_verl_vanilla_without_dual_clip():
    from verl.trainer.ppo.core_algos import get_policy_loss_fn

    import soft_spatial.actor.loss  # noqa: F401

    old, new, _, adv, mask = data(seed=3)
    cfg = actor_config()
    a, _ = get_policy_loss_fn("soft_grpo")(old, new, adv, mask, "token-mean", cfg)
    b, _ = get_policy_loss_fn("vanilla")(old, new, adv, mask, "token-mean", cfg)
    torch.testing.assert_close(a, b)  # ratios stay below clip_ratio_c = 3: no dual clip


def test_soft_ppo_loss_adds_low_var_kl_token_mean():
    """soft_ppo_loss = verl's ppo_loss: surrogate + 1e-3·token-mean(low_var_kl) over soft steps
    and answer tokens alike, from the engine's nested per-step log_probs."""
    from tensordict import TensorDict
    from verl.utils import tensordict_utils as tu

    from soft_spatial.actor.loss import soft_ppo_loss

    old, new, ref, adv, mask = data(b=2, r=4, seed=5)
    mask[:] = True
    prompt_len = 3
    # nested full-sequence log_probs: response step t sits at packed index prompt_len + t - 1
    full = torch.zeros(2, prompt_len + 4, dtype=torch.float64)
    full[:, prompt_len - 1: prompt_len + 3] = new
    nested = torch.nested.nested_tensor_from_jagged(full.reshape(-1),
                                                    torch.tensor([0, 7, 14]))
    td = TensorDict(dict(prompts=torch.ones(2, prompt_len, dtype=torch.long),
                         responses=torch.ones(2, 4, dtype=torch.long),
                         attention_mask=torch.ones(2, prompt_len + 4, dtype=torch.long),
                         response_mask=mask.long(), old_log_probs=old, advantages=adv,
                         ref_log_prob=ref, trace_soft=torch.tensor([[1, 1, 0, 0], [1, 0, 0, 0]])),
                    batch_size=[2])
    tu.assign_non_tensor(td, dp_size=1, batch_num_tokens=8, global_batch_size=2)
    cfg = actor_config()
    loss, metrics = soft_ppo_loss(cfg, {"log_probs": nested}, td)
    rho = torch.exp(new - old)
    pg = torch.maximum(-adv * rho, -adv * rho.clamp(0.8, 1.2)).mean()
    kl = (torch.exp(ref - new) - (ref - new) - 1).clamp(-10, 10).mean()
    torch.testing.assert_close(loss, pg + 1e-3 * kl)
    assert metrics["actor/soft_step_frac"] == pytest.approx(3 / 8)


def test_check_actor_config_flags_departures():
    from soft_spatial.actor.loss import check_actor_config

    assert check_actor_config(actor_config()) == []
    assert check_actor_config(actor_config(loss_agg_mode="seq-mean-token-mean")) == []
    with pytest.warns(RuntimeWarning):
        msgs = check_actor_config(actor_config(entropy_coeff=0.01, loss_agg_mode="token-sum"))
    assert len(msgs) == 2


def eq8_by_hand(old, new, adv, mask, clip=0.2):
    """Eq. 8 written out: 1/G Σ_i 1/|o_i| Σ_{t∈o_i} max(−A ρ, −A clip(ρ)) (python loops, fp64)."""
    import math

    total, count = 0.0, 0
    for i in range(old.shape[0]):
        steps = [t for t in range(old.shape[1]) if mask[i, t]]
        if not steps:
            continue
        s = 0.0
        for t in steps:
            rho = math.exp(float(new[i, t]) - float(old[i, t]))
            a = float(adv[i, t])
            s += max(-a * rho, -a * min(max(rho, 1 - clip), 1 + clip))
        total += s / len(steps)
        count += 1
    return total / count


def test_eq8_aggregation_by_hand_and_micro_batch_invariant():
    """seq-mean-token-mean is eq. 8: rollouts of different lengths weigh equally (token-mean
    would not), and micro-batches summed with verl's global batch size give the same loss."""
    from soft_spatial.actor.loss import soft_grpo_policy_loss

    old, new, _, adv, mask = data(b=4, r=6, seed=11)
    mask[1, 2:] = False  # lengths 3, 2, 6, 6 (rollout 0 was masked from 3 in data())
    mask[0, 3:] = False
    cfg = actor_config()
    full, _ = soft_grpo_policy_loss(old, new, adv, mask, "seq-mean-token-mean", cfg)
    assert full.item() == pytest.approx(eq8_by_hand(old, new, adv, mask), rel=1e-12)
    tok, _ = soft_grpo_policy_loss(old, new, adv, mask, "token-mean", cfg)
    assert abs(tok.item() - full.item()) > 1e-3  # the two readings really differ on this batch
    cfg.global_batch_info.update(dp_size=1, global_batch_size=4, batch_num_tokens=None)
    halves = sum(soft_grpo_policy_loss(old[s], new[s], adv[s], mask[s], "seq-mean-token-mean",
                                       cfg)[0] for s in (slice(0, 2), slice(2, 4)))
    assert halves.item() == pytest.approx(full.item(), rel=1e-12)


def test_train_config_defaults_to_eq8():
    from omegaconf import OmegaConf

    cfg = OmegaConf.load(os.path.join(os.path.dirname(__file__), "..", "..", "configs", "train.yaml"))
    assert cfg.actor_rollout_ref.actor.loss_agg_mode == "seq-mean-token-mean"
    assert cfg.actor_rollout_ref.actor.kl_loss_type == "low_var_kl"


def _kl_batch(seed=4):
    """A 2×4 batch with soft steps (trace_soft) and nested current log-probs / candidate logp."""
    from tensordict import TensorDict
    from verl.utils import tensordict_utils as tu

    g = torch.Generator().manual_seed(seed)
    old, new, ref, adv, mask = data(b=2, r=4, seed=seed)
    mask[:] = True
    mask[1, 3] = False
    k, prompt_len = 3, 2
    cand = torch.log_softmax(torch.randn(2, 4, k, generator=g, dtype=torch.float64), -1)
    ref_cand = torch.log_softmax(cand + 0.5 * torch.randn(2, 4, k, generator=g,
                                                          dtype=torch.float64), -1)
    soft = torch.tensor([[1, 1, 0, 0], [1, 0, 0, 0]])
    lens = [prompt_len + 4, prompt_len + 3]

    def nested(x):  # response step t at packed index prompt_len + t − 1 of its sequence
        rows = []
        for i, n in enumerate(lens):
            full = x.new_zeros((n,) + tuple(x.shape[2:]))
            full[prompt_len - 1: n - 1] = x[i, : n - prompt_len]
            rows.append(full)
        return torch.nested.nested_tensor_from_jagged(torch.cat(rows),
                                                      torch.tensor([0, lens[0], sum(lens)]))

    resp = torch.ones(2, 4, dtype=torch.long)
    resp[1, 3] = 0
    attn = torch.cat([torch.ones(2, prompt_len, dtype=torch.long), resp], 1)
    td = TensorDict(dict(prompts=torch.ones(2, prompt_len, dtype=torch.long),
                         responses=torch.ones(2, 4, dtype=torch.long), attention_mask=attn,
                         response_mask=resp, old_log_probs=old, advantages=adv, ref_log_prob=ref,
                         ref_cand_logp=ref_cand, trace_soft=soft), batch_size=[2])
    tu.assign_non_tensor(td, dp_size=1, batch_num_tokens=None, global_batch_size=None)
    out = {"log_probs": nested(new), "cand_logp": nested(cand)}
    return td, out, (old, new, ref, adv, mask.bool(), cand, ref_cand, soft.bool())


@pytest.mark.parametrize("agg", ["seq-mean-token-mean", "token-mean"])
def test_soft_ppo_loss_candidate_kl_against_reference(agg):
    """kl.over=candidates: surrogate + coef·agg(KL) with the exact candidate KL at soft steps and
    low_var_kl on the token log-prob at discrete steps; likelihood (default) is verl's term."""
    from soft_spatial.actor.loss import soft_ppo_loss
    from soft_spatial.softthink import KLConfig

    td, out, (old, new, ref, adv, mask, cand, ref_cand, soft) = _kl_batch()
    cfg = actor_config(loss_agg_mode=agg)
    loss, metrics = soft_ppo_loss(cfg, out, td, kl=KLConfig(over="candidates"))
    rho = torch.exp(new - old)
    pg = torch.maximum(-adv * rho, -adv * rho.clamp(0.8, 1.2))
    k3 = (torch.exp(ref - new) - (ref - new) - 1).clamp(-10, 10)
    exact = (cand.exp() * (cand - ref_cand)).sum(-1)
    kl = torch.where(soft, exact, k3)

    def agg_fn(m):
        if agg == "token-mean":
            return m[mask].mean()
        return torch.stack([m[i][mask[i]].mean() for i in range(m.shape[0])]).mean()

    torch.testing.assert_close(loss, agg_fn(pg) + 1e-3 * agg_fn(kl))
    assert metrics["actor/kl_soft_mean"] == pytest.approx(exact[soft & mask].mean().item())
    default, _ = soft_ppo_loss(cfg, out, td)
    torch.testing.assert_close(default, agg_fn(pg) + 1e-3 * agg_fn(k3))
    del out["cand_logp"]
    with pytest.raises(KeyError, match="cand_logp"):
        soft_ppo_loss(cfg, out, td, kl=KLConfig(over="candidates"))


def test_kl_config_rejects_unknown_reading():
    from soft_spatial.softthink import KLConfig

    with pytest.raises(ValueError, match="KLConfig.over"):
        KLConfig(over="full")
