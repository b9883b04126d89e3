"""verl's version and every internal soft_spatial touches (soft_spatial/compat/verl/checks.py):
``check_internals`` is empty on the pinned verl and names each moved internal, of every area
(rollout, engine, trainer, the generation seam, the loader's state at an epoch's end)."""
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
