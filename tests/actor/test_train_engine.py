"""The soft actor engine on verl's real FSDP2 engine (1 gloo process, CPU platform).

The training-side replay must match the rollout: log_probs returned by the engine at response
positions equal `engines.replay.replay_completion`'s per-step likelihood for LocalEngine rollouts
of a tiny model, on verl's remove-padding and padded paths.
"""

import pytest
import torch

import actor_helpers as H  # noqa: E402


@pytest.fixture(scope="module")
def rollout(tiny_qwen3_text_small):
    from soft_spatial.engines.replay import replay_completion

    eng, prompts, outs, _ = H.rollouts(tiny_qwen3_text_small)
    replays = [replay_completion(eng, p, o) for p, o in zip(prompts, outs)]
    return prompts, outs, [r["loglik"] for r in replays], [r["cand_logp"] for r in replays]


def test_registered_for_cpu_and_gpu_devices(process_group):
    from verl.workers.engine.base import EngineRegistry

    from soft_spatial.actor.train_engine import MODEL_TYPE, SoftFSDPEngine

    assert EngineRegistry.get_engine_cls(MODEL_TYPE, "fsdp2") is SoftFSDPEngine
    table = EngineRegistry._engines[MODEL_TYPE]
    for backend in ("fsdp", "fsdp2"):
        assert {"cuda", "npu", "cpu"} <= set(table[backend])


@pytest.mark.parametrize("remove_padding", [True, False])
def test_engine_log_probs_equal_rollout_replay(process_group, rollout, tiny_qwen3_text_small,
                                               remove_padding):
    from verl.workers.utils.padding import no_padding_2_padding

    prompts, outs, ref, _ = rollout
    soft = torch.cat([o.trace.soft for o in outs])
    assert soft.any() and (~soft).any()  # both kinds of steps are covered
    train_engine = H.make_train_engine(tiny_qwen3_text_small, remove_padding=remove_padding)
    td = H.set_infer_keys(H.verl_batch(prompts, outs), 2, remove_padding)
    with train_engine.eval_mode():
        out = train_engine.infer_batch(td)
    lp = no_padding_2_padding(out["model_output"]["log_probs"], td)
    for i, r in enumerate(ref):
        torch.testing.assert_close(lp[i, : len(r)], r.float(), rtol=1e-5, atol=5e-5)
        assert (lp[i, len(r):] == 0).all()


def test_engine_log_probs_equal_the_rollouts_under_the_reference_density(process_group,
                                                                         tiny_qwen3_text_small):
    """The learning recipe's density (the authors' release's variant): the rollout records each
    soft step under it and the actor, configured with it, computes the same likelihoods (the
    consistency check's two sides; they once differed by 16-18 nats)."""
    from verl.workers.utils.padding import no_padding_2_padding

    from soft_spatial.softthink import DensityConfig

    density = DensityConfig.reference()
    _, prompts, outs, _ = H.rollouts(tiny_qwen3_text_small, density=density)
    soft = torch.cat([o.trace.soft for o in outs])
    assert soft.any() and (~soft).any()
    train_engine = H.make_train_engine(tiny_qwen3_text_small, remove_padding=True)
    train_engine.configure_soft(density=density)
    td = H.set_infer_keys(H.verl_batch(prompts, outs), 2, True)
    with train_engine.eval_mode():
        out = train_engine.infer_batch(td)
    lp = no_padding_2_padding(out["model_output"]["log_probs"], td)
    for i, o in enumerate(outs):
        roll = torch.tensor(o.logprobs, dtype=torch.float32)
        torch.testing.assert_close(lp[i, : len(roll)], roll, rtol=1e-5, atol=5e-5)


def test_batch_without_trace_is_the_stock_engine(process_group, rollout, tiny_qwen3_text_small):
    """No trace tensors: the subclass returns exactly what verl's FSDPEngineWithLMHead returns."""
    from verl.workers.utils.padding import no_padding_2_padding

    prompts, outs, _, _ = rollout
    train_engine = H.make_train_engine(tiny_qwen3_text_small, remove_padding=False)
    td = H.verl_batch(prompts, outs)
    for key in [k for k in td.keys() if k.startswith("trace_")]:
        del td[key]
    H.set_infer_keys(td, 2, False)
    with train_engine.eval_mode():
        out = train_engine.infer_batch(td)
    lp = no_padding_2_padding(out["model_output"]["log_probs"], td)
    # token log-probs of the spine tokens: finite, <= 0, and differ from the soft densities
    assert torch.isfinite(lp).all() and (lp <= 0).all()


def test_candidate_kl_reading_returns_candidate_logp(process_group, rollout,
                                                     tiny_qwen3_text_small):
    """kl.over=candidates: the engine also returns log p̃^θ of the recorded candidates at soft
    steps (zeros at discrete steps), equal to the teacher-forced replay's."""
    from verl.workers.utils.padding import no_padding_2_padding

    from soft_spatial.softthink import KLConfig

    prompts, outs, _, cand = rollout
    train_engine = H.make_train_engine(tiny_qwen3_text_small, remove_padding=True)
    train_engine.configure_soft(kl=KLConfig(over="candidates"))
    td = H.set_infer_keys(H.verl_batch(prompts, outs), 2, True)
    with train_engine.eval_mode():
        out = train_engine.infer_batch(td)
    got = no_padding_2_padding(out["model_output"]["cand_logp"], td)
    for i, (c, o) in enumerate(zip(cand, outs)):
        soft = o.trace.soft
        torch.testing.assert_close(got[i, : len(c)][soft], c[soft].float(), rtol=1e-5, atol=5e-5)
        assert (got[i, : len(c)][~soft] == 0).all() and (got[i, len(c):] == 0).all()


def test_misaligned_trace_raises(process_group, rollout, tiny_qwen3_text_small):
    prompts, outs, _, _ = rollout
    train_engine = H.make_train_engine(tiny_qwen3_text_small, remove_padding=True)
    td = H.verl_batch(prompts, outs)
    td["trace_topk_ids"] = torch.roll(td["trace_topk_ids"], 1, dims=1)
    H.set_infer_keys(td, 2, True)
    with train_engine.eval_mode(), pytest.raises(ValueError, match="misaligned"):
        train_engine.infer_batch(td)


def test_fp32_logits_setting_reaches_the_actors_head(process_group, rollout, tiny_qwen3_text_small):
    """density.fp32_logits with bf16 compute (verl's autocast): the actor's head returns the fp32
    product of the bf16 hidden state and weights, and the log-probs are scored from it; without
    the setting the head's output is bf16. The per-step likelihoods change by the rounding."""
    import torch.nn.functional as F
    from verl.workers.utils.padding import no_padding_2_padding

    from soft_spatial.softthink import DensityConfig

    prompts, outs, _, _ = rollout
    train_engine = H.make_train_engine(tiny_qwen3_text_small, remove_padding=True,
                                       param_dtype="bf16")
    td = H.set_infer_keys(H.verl_batch(prompts, outs), 2, True)
    head = train_engine.module.get_output_embeddings()
    seen, exact = [], []

    def before(module, args):  # after FSDP2's unshard (its hooks run first, its reshard too)
        with torch.autocast("cpu", enabled=False):
            exact.append(F.linear(args[0].float(), module.weight.float()))

    def after(module, args, out):
        seen.append((args[0].dtype, out.dtype, float((out.float() - exact.pop()).abs().max())))

    handles = [head.register_forward_pre_hook(before), head.register_forward_hook(after)]
    lp = {}
    try:
        for fp32 in (False, True):
            train_engine.configure_soft(density=DensityConfig(fp32_logits=fp32))
            seen.clear()
            with train_engine.eval_mode():
                out = train_engine.infer_batch(td)
            lp[fp32] = no_padding_2_padding(out["model_output"]["log_probs"], td)
            assert seen and all(h == torch.bfloat16 for h, _, _ in seen)
            assert {o for _, o, _ in seen} == {torch.float32 if fp32 else torch.bfloat16}
            err = max(e for _, _, e in seen)
            assert (err < 1e-4) if fp32 else (err > 1e-3), (fp32, err)
    finally:
        for handle in handles:
            handle.remove()
        train_engine.configure_soft(density=DensityConfig())
    assert "forward" not in head.__dict__  # restored after every micro-batch
    diff = (lp[True] - lp[False]).abs()
    assert torch.isfinite(lp[True]).all() and 1e-4 < float(diff.max()) < 1.0
