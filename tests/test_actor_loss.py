"""The registered soft_grpo policy loss and the actor loss_fn, against independent formulas."""
import os

os.environ.setdefault("VERL_PLATFORM", "cpu")

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
    with pytest.warns(RuntimeWarning):
        msgs = check_actor_config(actor_config(entropy_coeff=0.01, loss_agg_mode="seq-mean-token-mean"))
    assert len(msgs) == 2
