"""The two-rank gloo run (two spawned processes, one process group) that two tests read:

* ``fsdp/``: a 2-rank FSDP2 actor update with soft replay and the AdaptSoft controller
  (tests/actor/test_adaptsoft_trainer.py::test_two_rank_fsdp2_update_keeps_controllers_equal);
* ``resume/``: only rank 0 writes ``adaptsoft.pt``, yet every rank resumes its own reference
  stream (tests/actor/test_adaptsoft_resume.py::test_every_rank_resumes_its_own_reference_stream).

One spawn for both: each rank's start (torch, verl, the package) costs far more than either body.
Each body writes ``rank{r}.pt`` under its own folder; the tests assert on those files."""
from __future__ import annotations

import copy
import os
from functools import partial

import torch

RESUME_SEED = 5


def _resume_body(rank: int, out_dir: str) -> None:
    import torch.distributed as dist

    import actor_helpers as H2
    from soft_spatial.actor.adaptsoft_trainer import AdaptSoftTrainer
    from soft_spatial.softthink import select_reference

    path = os.path.join(out_dir, "adaptsoft.pt")

    def run(trainer, steps):
        picks = []
        for _ in range(steps):
            for _ in range(3):  # three micro-batches, each draws a reference set (alignment_step)
                picks.append(select_reference(16, 0.25, trainer.generator))
            for p in trainer.controller.parameters():
                p.grad = torch.ones_like(p)
            trainer.step()
        return picks

    whole = AdaptSoftTrainer(H2.trained_controller(64, seed=2), seed=RESUME_SEED)
    want = run(whole, 4)
    first = AdaptSoftTrainer(H2.trained_controller(64, seed=2), seed=RESUME_SEED)
    got = run(first, 2)
    if rank == 0:  # as SoftFSDPEngine.save_checkpoint does
        first.save(path)
    dist.barrier()
    resumed = AdaptSoftTrainer(H2.trained_controller(64, seed=2), seed=RESUME_SEED)
    resumed.load(path)
    got += run(resumed, 2)
    torch.save({"want": want, "got": got}, os.path.join(out_dir, f"rank{rank}.pt"))
    dist.barrier()


def _fsdp_body(rank: int, world: int, model_dir: str, out_dir: str) -> None:
    import torch.distributed as dist

    import actor_helpers as H2
    from soft_spatial.actor.adaptsoft_trainer import AdaptSoftTrainer
    from soft_spatial.actor.loss import soft_ppo_loss

    ctrl = H2.trained_controller(64)
    _, prompts, outs, _ = H2.rollouts(model_dir, mode="adaptsoft", controller=ctrl)
    mine = slice(rank * 2, rank * 2 + 2)  # the DP split of 4 sequences
    train_engine = H2.make_train_engine(model_dir)
    trainer = AdaptSoftTrainer(copy.deepcopy(ctrl), seed=7)
    train_engine.configure_soft(adaptsoft=trainer)
    td = H2.train_batch_td(train_engine, prompts[mine], outs[mine], micro_batch_size=1, seed=rank)
    from verl.utils import tensordict_utils as tu

    tu.assign_non_tensor(td, global_batch_size=4)
    before = [p.detach().clone() for p in trainer.controller.parameters()]
    with train_engine.train_mode():
        out = train_engine.train_batch(td, partial(soft_ppo_loss, config=H2.actor_config()))
    after = torch.cat([p.detach().reshape(-1) for p in trainer.controller.parameters()])
    gathered = [torch.zeros_like(after) for _ in range(world)]
    dist.all_gather(gathered, after)
    changed = any(not torch.equal(a, b) for a, b in zip(before, trainer.controller.parameters()))
    torch.save({"gathered": gathered, "changed": changed, "grad_norm": out["metrics"]["grad_norm"],
                "metrics": {k: v for k, v in out["metrics"].items() if k.startswith("adaptsoft/")}},
               os.path.join(out_dir, f"rank{rank}.pt"))
    dist.barrier()


def _rank_main(rank: int, world: int, init_file: str, model_dir: str, out_dir: str) -> None:
    import torch.distributed as dist

    from soft_spatial.integration.platform import init_process_group, use_cpu_platform

    torch.set_num_threads(1)
    use_cpu_platform()
    init_process_group(rank, world, "file://" + init_file)
    _resume_body(rank, os.path.join(out_dir, "resume"))  # first: it draws on its own generators
    _fsdp_body(rank, world, model_dir, os.path.join(out_dir, "fsdp"))
    dist.barrier()
    dist.destroy_process_group()


def run(model_dir, out_dir) -> None:
    """Both bodies on two ranks; ``out_dir/resume`` and ``out_dir/fsdp`` hold their ``rank{r}.pt``."""
    import torch.multiprocessing as mp

    for sub in ("resume", "fsdp"):
        os.makedirs(os.path.join(out_dir, sub), exist_ok=True)
    mp.spawn(_rank_main, args=(2, os.path.join(out_dir, "init"), str(model_dir), str(out_dir)),
             nprocs=2, join=True)
