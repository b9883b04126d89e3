"""Validation generations logged with their τ per soft step (soft_spatial.integration.ppo_trainer)."""
import torch

import pytest

from soft_spatial.softthink import SoftTrace


@pytest.fixture(scope="module")
def trainer_module():
    from soft_spatial.integration.platform import use_cpu_platform

    use_cpu_platform()  # the platform must exist before verl's trainer imports
    from soft_spatial.integration import ppo_trainer
    return ppo_trainer


def _trace(taus, soft):
    n = len(taus)
    return SoftTrace(torch.zeros(n, 2, dtype=torch.long), torch.zeros(n, 2),
                     torch.tensor(taus), torch.zeros(n), torch.zeros(n, 3), torch.zeros(n),
                     torch.tensor(soft))


def test_tau_note_lists_soft_steps_in_order_and_skips_discrete_ones(trainer_module):
    tau_note = trainer_module.tau_note
    note = tau_note(_trace([0.25, 0.5, 0.875, 1.0], [True, True, True, False]))
    assert note.startswith("[3 soft steps; ")
    values = [float(v) for v in note.rstrip("]").split(":")[1].split()]
    assert values == [0.25, 0.5, 0.875]  # the discrete step's τ (1.0) is not a mixture τ
    # a round trip through the lists the rollout sends keeps the same note
    t = _trace([0.3, 0.7], [True, True])
    assert tau_note(SoftTrace.from_lists(t.to_lists())) == tau_note(t)
    assert tau_note(_trace([1.0], [False])) == "[0 soft steps; tau per soft step: ]"


def test_annotate_in_order_skips_padding_rows_and_keeps_duplicates_apart(trainer_module):
    annotate_in_order = trainer_module.annotate_in_order
    # two generated batches padded to a multiple of 2: batch 1 = a, a, b + pad "a"; batch 2 = c + pad "c"
    generated = [("a", "n1"), ("a", "n2"), ("b", "n3"), ("x", "pad"), ("c", "n4"), ("c", "pad2")]
    outputs = ["a", "a", "b", "c"]
    assert annotate_in_order(outputs, generated) == ["a\n\nn1", "a\n\nn2", "b\n\nn3", "c\n\nn4"]
    # nothing captured (e.g. a hard rollout backend without traces): the texts stay as they are
    assert annotate_in_order(outputs, []) == outputs
    # an output that no generated row matches is left alone and does not consume later rows
    assert annotate_in_order(["zz", "b"], generated) == ["zz", "b\n\nn3"]


# -- resuming at an epoch's end ----------------------------------------------------------------
def _loader(n=6, batch=2):
    """verl's training loader as ``RayPPOTrainer._create_dataloader`` builds it (its sampler from
    ``create_rl_sampler``, torchdata's stateful loader), over the records 0..n-1."""
    from omegaconf import OmegaConf
    from torchdata.stateful_dataloader import StatefulDataLoader
    from verl.trainer.ppo.utils import create_rl_sampler

    data = list(range(n))
    sampler = create_rl_sampler(OmegaConf.create({"shuffle": True, "seed": 0, "sampler": None}), data)
    return StatefulDataLoader(data, batch_size=batch, sampler=sampler, drop_last=True, num_workers=0)


def _epochs(loader, k):
    return [[b.tolist() for b in loader] for _ in range(k)]


def _saved_run(tmp_path, steps):
    """An uninterrupted run's three epochs, and the checkpoint folder verl writes after ``steps``
    steps of another run like it (its loader state in ``data.pt``, as ``_save_checkpoint`` saves it)."""
    uninterrupted = _epochs(_loader(), 3)
    run, batches = _loader(), []
    while len(batches) < steps:
        for b in run:
            batches.append(b.tolist())
            if len(batches) == steps:
                folder = tmp_path / "ckpt" / f"global_step_{steps}"
                folder.mkdir(parents=True)
                torch.save(run.state_dict(), folder / "data.pt")
                break
    return uninterrupted, folder


def _resumed(trainer_module, folder, steps, monkeypatch):
    """A SoftRayPPOTrainer on a fresh loader, resumed at ``steps`` by its ``_load_checkpoint``
    (verl's own inside it; no workers: the actor's load a no-op)."""
    from types import SimpleNamespace

    from omegaconf import OmegaConf

    trainer = object.__new__(trainer_module.SoftRayPPOTrainer)
    ckpt = folder.parent
    (ckpt / "latest_checkpointed_iteration.txt").write_text(str(steps))
    trainer.config = OmegaConf.create({"trainer": {
        "resume_mode": "auto", "resume_from_path": None, "default_local_dir": str(ckpt),
        "default_hdfs_dir": None, "del_local_ckpt_after_load": False}})
    trainer.actor_rollout_wg = SimpleNamespace(load_checkpoint=lambda *a, **k: None)
    trainer.use_critic, trainer.global_steps = False, 0
    trainer.train_dataloader = _loader()
    monkeypatch.chdir(ckpt)
    trainer._load_checkpoint()
    assert trainer.global_steps == steps
    return trainer


def test_a_run_resumed_at_an_epochs_end_draws_the_next_epoch_as_the_uninterrupted_run(
        trainer_module, tmp_path, monkeypatch, capsys):
    """verl 0.9.1 skips the loader's state at an epoch's end, so its next epoch repeats the first
    one's order; the subclass restores it: the resumed run's next epochs are the uninterrupted run's."""
    uninterrupted, folder = _saved_run(tmp_path, steps=3)  # 6 records, 2 a step: epoch 1 ends
    trainer = _resumed(trainer_module, folder, 3, monkeypatch)
    assert "Skipping dataloader state restore" in capsys.readouterr().out  # verl's skip ran
    assert _epochs(trainer.train_dataloader, 2) == uninterrupted[1:]
    # what verl alone gives, the fault this guards against: the first epoch's order again
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer

    monkeypatch.setattr(trainer_module.SoftRayPPOTrainer, "_load_checkpoint",
                        RayPPOTrainer._load_checkpoint)
    alone = _resumed(trainer_module, folder, 3, monkeypatch)
    assert _epochs(alone.train_dataloader, 1) == uninterrupted[:1] != uninterrupted[1:2]


def test_a_run_resumed_mid_epoch_keeps_verls_own_restore(trainer_module, tmp_path, monkeypatch):
    """Mid-epoch verl restores the state itself: the rest of the epoch, then the next ones."""
    from soft_spatial.compat.verl.trainer import restore_epoch_boundary_order

    uninterrupted, folder = _saved_run(tmp_path, steps=4)  # one step into epoch 2
    trainer = _resumed(trainer_module, folder, 4, monkeypatch)
    assert not restore_epoch_boundary_order(trainer, folder)  # nothing to do mid-epoch
    assert [b.tolist() for b in trainer.train_dataloader] == uninterrupted[1][1:]
    assert _epochs(trainer.train_dataloader, 1) == uninterrupted[2:]


def test_a_state_that_is_not_an_epochs_end_is_refused_naming_the_file(tmp_path):
    """A checkpoint whose loader state does not end an epoch at its step (other data or batch
    size): a clear error naming its data.pt, not a drained epoch of samples."""
    from types import SimpleNamespace

    from soft_spatial.compat.verl.trainer import restore_epoch_boundary_order

    _, folder = _saved_run(tmp_path, steps=2)  # 2 of 3 batches into epoch 1
    other = SimpleNamespace(train_dataloader=_loader(n=8), global_steps=4)  # 4 batches an epoch
    with pytest.raises(ValueError, match=r"global_step_2/data\.pt: the dataloader state at step 4 "
                                         r"yielded 2 batches of an epoch of 4"):
        restore_epoch_boundary_order(other, folder)
    assert restore_epoch_boundary_order(other, tmp_path / "none") is False  # no data.pt
