"""Fails loudly when verl changes the internals soft_spatial touches (soft_spatial/compat/verl/)."""
import os

os.environ.setdefault("VERL_PLATFORM", "cpu")


def test_pinned_verl_version():
    from soft_spatial.compat.verl.checks import VERL_VERSION, check_verl_version

    assert check_verl_version(strict=True) == VERL_VERSION


def test_internals_we_touch_are_unchanged():
    from soft_spatial.integration.platform import use_cpu_platform
    from soft_spatial.compat.verl.checks import check_internals

    use_cpu_platform()  # VERL_PLATFORM=cpu: the platform must exist before verl's engines import

    assert check_internals() == []


def test_cpu_platform_selected_and_engines_registered():
    from soft_spatial.integration.platform import PlatformCPU, use_cpu_platform

    use_cpu_platform()
    from verl.utils.device import (get_device_id, get_device_name, get_nccl_backend,
                                   get_resource_name, get_torch_device)
    from verl.workers.engine.base import EngineRegistry
    from verl.workers.engine.fsdp.transformer_impl import FSDPEngineWithLMHead

    assert (get_device_name(), get_nccl_backend(), get_resource_name()) == ("cpu", "gloo", "CPU")
    assert get_device_id() == "cpu"
    dev = get_torch_device()
    assert dev.max_memory_allocated() == 0 and dev.is_available()
    dev.empty_cache()
    assert EngineRegistry.get_engine_cls("language_model", "fsdp2") is FSDPEngineWithLMHead
    assert not PlatformCPU().is_platform_available(use_smi_check=True)  # never auto-detected


def test_register_is_idempotent():
    from soft_spatial.integration.platform import register

    register()
    register()
    import soft_spatial.actor.train_engine as eng

    eng.register()
    eng.register()


def test_ref_log_prob_outputs_matches_upstream_and_keeps_extra_outputs():
    """ref_log_prob_outputs gives verl 0.9.1's ref_log_prob bit for bit (same fake worker, same
    batch) and also the extra per-token output, response-aligned like it."""
    import torch
    from verl import DataProto
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer
    from verl.utils import tensordict_utils as tu

    from soft_spatial.compat.verl.trainer import ref_log_prob_outputs

    b, p, r, k = 3, 4, 5, 2
    g = torch.Generator().manual_seed(0)
    attn = torch.zeros(b, p + r, dtype=torch.long)
    for i, (pl, rl) in enumerate([(4, 5), (2, 3), (3, 1)]):
        attn[i, p - pl: p + rl] = 1
    ids = torch.randint(1, 100, (b, p + r), generator=g) * attn
    batch = DataProto.from_dict(tensors=dict(
        input_ids=ids, attention_mask=attn, position_ids=(attn.cumsum(1) - 1).clamp(min=0),
        prompts=ids[:, :p], responses=ids[:, p:], response_mask=attn[:, p:]))

    class Worker:
        def compute_ref_log_prob(self, td):
            x = -td["input_ids"].values().double() / 100  # value of packed token j
            off = td["input_ids"].offsets()
            cand = torch.stack([x * (j + 1) for j in range(k)], -1)
            return tu.get_tensordict({
                "log_probs": torch.nested.nested_tensor_from_jagged(x, off),
                "cand_logp": torch.nested.nested_tensor_from_jagged(cand, off)})

    class Trainer:
        ref_in_actor = False
        ref_policy_wg = Worker()

    upstream = RayPPOTrainer._compute_ref_log_prob(Trainer(), batch)
    ours = ref_log_prob_outputs(Trainer(), batch, {"cand_logp": "ref_cand_logp"})
    ref = upstream.batch["ref_log_prob"]
    assert torch.equal(ours.batch["ref_log_prob"], ref)
    for j in range(k):
        assert torch.equal(ours.batch["ref_cand_logp"][..., j], ref * (j + 1))
    # response step t carries the value at the token before it (verl's shift by one)
    assert ref[0, 0] == -ids[0, p - 1] / 100


def test_check_internals_names_a_moved_private_override(monkeypatch):
    """An overridden private method that verl renames, or stops calling, is reported by name."""
    from soft_spatial.integration.platform import use_cpu_platform

    use_cpu_platform()  # before verl's trainer imports (also when this test runs alone)
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer

    from soft_spatial.compat.verl.checks import check_internals
    monkeypatch.delattr(RayPPOTrainer, "_update_actor")
    problems = check_internals()
    assert problems == ["RayPPOTrainer._update_actor is gone (overridden by soft_spatial)"]


def test_check_internals_names_a_moved_internal_of_every_area(monkeypatch):
    """One moved internal in each verl area (rollout, engine, trainer) is reported, each by name."""
    from verl.single_controller.ray.base import ResourcePoolManager
    from verl.workers.engine.fsdp import transformer_impl
    from verl.workers.rollout import base

    from soft_spatial.compat.verl.checks import check_internals
    from soft_spatial.integration.platform import use_cpu_platform

    use_cpu_platform()
    monkeypatch.delattr(base, "_ROLLOUT_REGISTRY")
    monkeypatch.delattr(transformer_impl, "FSDPEngineWithLMHead")
    monkeypatch.delattr(ResourcePoolManager, "_check_resource_available")
    assert check_internals() == [
        "verl.workers.rollout.base._ROLLOUT_REGISTRY is gone (register_rollout_adapter)",
        "verl.workers.engine.fsdp.transformer_impl.FSDPEngineWithLMHead is gone",
        "ResourcePoolManager._check_resource_available is gone (cpu_pool_manager)"]


def test_register_rollout_adapter_and_loss_config():
    from functools import partial

    import pytest
    from verl.workers.rollout.base import get_rollout_class

    from soft_spatial.compat.verl.engine import loss_config
    from soft_spatial.compat.verl.rollout import register_rollout_adapter

    register_rollout_adapter("compat_test_backend",
                             "soft_spatial.rollout.replica.LocalSoftServerAdapter")
    from soft_spatial.rollout.replica import LocalSoftServerAdapter

    assert get_rollout_class("compat_test_backend", "async") is LocalSoftServerAdapter
    config = object()
    assert loss_config(partial(print, config=config)) is config
    with pytest.raises(RuntimeError, match="compat/verl/engine.py"):
        loss_config(print)


def test_before_each_generation_prepares_every_batch_on_the_instance_only():
    """The rollout manager's bound ``generate_sequences`` is wrapped on the instance: every batch
    goes through ``prepare`` first, then to verl's method, and the class is left alone."""
    from types import SimpleNamespace

    from verl.experimental.agent_loop.agent_loop import AgentLoopManager

    from soft_spatial.compat.verl.trainer import before_each_generation

    upstream = AgentLoopManager.generate_sequences
    seen = []

    class Manager(AgentLoopManager):
        def __init__(self):  # no workers: only the method lookup matters here
            pass

        def generate_sequences(self, prompts):
            seen.append(("generate", dict(prompts)))
            return "out"

    manager, other = Manager(), Manager()
    trainer = SimpleNamespace(async_rollout_manager=manager)
    before_each_generation(trainer, lambda batch: (seen.append(("prepare", dict(batch))),
                                                   batch.update(tag=len(seen))))
    assert manager.generate_sequences({"a": 1}) == "out"
    assert seen == [("prepare", {"a": 1}), ("generate", {"a": 1, "tag": 1})]
    assert "generate_sequences" in vars(manager) and "generate_sequences" not in vars(other)
    assert AgentLoopManager.generate_sequences is upstream


def test_check_internals_names_a_moved_generation_seam(monkeypatch):
    """The rollout manager's method, the replica count and fit's call through the instance are
    each reported by name when they move."""
    from verl.experimental.agent_loop.agent_loop import AgentLoopManager
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer
    from verl.workers.rollout.llm_server import LLMServerManager

    from soft_spatial.compat.verl.checks import check_internals
    from soft_spatial.integration.platform import use_cpu_platform

    use_cpu_platform()
    monkeypatch.setattr(AgentLoopManager, "generate_sequences", lambda self, batch, extra: None)
    monkeypatch.delattr(LLMServerManager, "get_replicas")
    monkeypatch.setattr(RayPPOTrainer, "init_workers", lambda self: None)
    assert check_internals() == [
        "AgentLoopManager.generate_sequences signature changed: ['self', 'batch', 'extra'] != "
        "['self', 'prompts']",
        "LLMServerManager.get_replicas is gone (tag_noise_keys)",
        "RayPPOTrainer.init_workers no longer sets self.async_rollout_manager = "
        "AgentLoopManager.create(...) (before_each_generation)"]


def test_check_internals_says_when_verl_stops_skipping_the_loader_state_at_an_epochs_end(monkeypatch):
    """verl restoring the loader's state at an epoch's end itself (or restoring it otherwise) is
    reported, naming restore_epoch_boundary_order, which would then drain a restored epoch."""
    from soft_spatial.integration.platform import use_cpu_platform

    use_cpu_platform()  # before verl's trainer imports (also when this test runs alone)
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer

    from soft_spatial.compat.verl.checks import check_internals

    def _load_checkpoint(self):  # a verl that restores the state at every step
        self._load_checkpoint()  # (never called: only its source is read)
        self.train_dataloader.load_state_dict(dataloader_state_dict)  # noqa: F821

    monkeypatch.setattr(RayPPOTrainer, "_load_checkpoint", _load_checkpoint)
    problems = check_internals()
    assert problems and all("RayPPOTrainer._load_checkpoint no longer contains" in p
                            and "(restore_epoch_boundary_order)" in p for p in problems)
    assert any("Skipping dataloader state restore" in p for p in problems)
