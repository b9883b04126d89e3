"""A resumed run trains AdaptSoft exactly as the same run uninterrupted (issue 34, item 7): the
reference-set generator's state travels in ``adaptsoft.pt``, on every DP rank, and a checkpoint
written before it did still loads (today's reseeding, with a warning)."""
import copy
import logging
import sys
from functools import partial

import pytest
import torch

import actor_helpers as H  # noqa: E402

SEED = 5


def _train(engine, trainer, td, steps, picks):
    """``steps`` real actor updates (verl's train_batch) with ``trainer`` as the engine's AdaptSoft."""
    from soft_spatial.actor.loss import soft_ppo_loss

    engine.configure_soft(adaptsoft=trainer)
    for _ in range(steps):
        with engine.train_mode():
            engine.train_batch(copy.copy(td), partial(soft_ppo_loss, config=H.actor_config()))
        picks.append(trainer.last.ref_seq.clone())


def test_a_resumed_run_draws_the_same_reference_sets_and_trains_the_same_controller(
        process_group, tiny_qwen3_text_small, tmp_path):
    from soft_spatial.actor.adaptsoft_trainer import AdaptSoftTrainer
    from soft_spatial.softthink import AlignmentConfig

    ctrl = H.trained_controller(64, seed=4)
    # 2 prompts x 4 rollouts = 8 sequences, half of them the reference set: 70 possible splits
    _, prompts, outs, _ = H.rollouts(tiny_qwen3_text_small, n=4, mode="adaptsoft", controller=ctrl)
    config = AlignmentConfig(ref_fraction=0.5)
    n = 4

    def fresh():
        return AdaptSoftTrainer(copy.deepcopy(ctrl), config, seed=SEED)

    # uninterrupted: N steps
    engine_a = H.make_train_engine(tiny_qwen3_text_small)
    td = H.train_batch_td(engine_a, prompts, outs, micro_batch_size=len(outs))  # one micro-batch
    whole, picks_a = fresh(), []
    _train(engine_a, whole, td, n, picks_a)

    # interrupted: N/2 steps, checkpoint, a fresh trainer loads it (the policy continues as verl
    # restores it), N/2 more
    engine_b = H.make_train_engine(tiny_qwen3_text_small)
    first, picks_b = fresh(), []
    _train(engine_b, first, td, n // 2, picks_b)
    first.save(tmp_path / "adaptsoft.pt")
    resumed = fresh()
    resumed.load(tmp_path / "adaptsoft.pt")
    _train(engine_b, resumed, td, n - n // 2, picks_b)

    assert len({tuple(p.tolist()) for p in picks_a}) > 1  # the splits do change from step to step
    for step, (a, b) in enumerate(zip(picks_a, picks_b), 1):
        assert torch.equal(a, b), f"step {step}: reference set {b.tolist()} != {a.tolist()}"
    assert torch.equal(whole.generator.get_state(), resumed.generator.get_state())
    assert whole.steps == resumed.steps == n
    for (k, x), (_, y) in zip(whole.controller.state_dict().items(),
                              resumed.controller.state_dict().items()):
        assert torch.equal(x, y), k


def test_a_checkpoint_without_the_generator_state_still_loads_with_a_warning(tmp_path, caplog):
    from soft_spatial.actor.adaptsoft_trainer import AdaptSoftTrainer

    a = AdaptSoftTrainer(H.trained_controller(64, seed=2), seed=SEED)
    for p in a.controller.parameters():
        p.grad = torch.ones_like(p)
    a.step()
    old = a.state_dict()
    old = {k: v for k, v in old.items() if not k.startswith("generator")}  # written before the fix
    torch.save(old, tmp_path / "adaptsoft.pt")
    b = AdaptSoftTrainer(H.trained_controller(64, seed=2), seed=SEED)
    with caplog.at_level(logging.WARNING, logger="soft_spatial.actor.adaptsoft_trainer"):
        b.load(tmp_path / "adaptsoft.pt")
    assert b.steps == 1
    assert any("reference-set generator" in r.getMessage() for r in caplog.records)
    # today's reseeding: a stream that depends on (seed, rank, steps)
    want = torch.Generator().manual_seed(SEED * 1_000_003 + 0 + 7919 * 1)
    assert torch.equal(b.generator.get_state(), want.get_state())


# -- two DP ranks: only rank 0 writes adaptsoft.pt, yet every rank resumes its own stream -------
def test_every_rank_resumes_its_own_reference_stream(two_rank_run):
    """Each rank (tests/support/actor_two_ranks.py, _resume_body) draws 4 steps uninterrupted, and
    2 steps, rank 0's checkpoint, 2 more: the same reference sets, and not those of the other rank."""
    r0, r1 = (torch.load(two_rank_run / "resume" / f"rank{r}.pt", weights_only=True) for r in (0, 1))
    assert any(not torch.equal(a, b) for a, b in zip(r0["want"], r1["want"]))  # ranks draw their own
    for r in (r0, r1):
        assert len(r["got"]) == len(r["want"])
        for i, (a, b) in enumerate(zip(r["want"], r["got"])):
            assert torch.equal(a, b), i


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
