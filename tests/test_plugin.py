"""The plugin's one ``register()``: after it verl's registries hold every entry, a second call
changes nothing, and importing the registering modules alone registers nothing."""
import os
import subprocess
import sys
import textwrap

SNAPSHOT = """
import sys
import warnings


def snapshot():  # verl's registries (imported here: its engine modules need the platform first)
    from verl.experimental.agent_loop.agent_loop import _agent_loop_registry
    from verl.plugin.platform import PlatformRegistry
    from verl.trainer.ppo.core_algos import POLICY_LOSS_REGISTRY
    from verl.workers.engine.base import EngineRegistry
    from verl.workers.rollout.base import _ROLLOUT_REGISTRY
    from verl.workers.rollout.replica import RolloutReplicaRegistry

    return {"platform": PlatformRegistry.get("cpu"),
            "engines": {m: {b: dict(d) for b, d in v.items()} for m, v in EngineRegistry._engines.items()},
            "losses": dict(POLICY_LOSS_REGISTRY), "agents": dict(_agent_loop_registry),
            "replicas": dict(RolloutReplicaRegistry._registry), "adapters": dict(_ROLLOUT_REGISTRY)}
"""


def _run(code: str, **env):
    out = subprocess.run([sys.executable, "-c", SNAPSHOT + textwrap.dedent(code)], capture_output=True,
                         text=True, timeout=600, env={**os.environ, **env})
    assert out.returncode == 0, out.stderr[-3000:]


def test_register_fills_every_registry_and_is_idempotent():
    _run("""
        import soft_spatial.plugin as plugin
        from soft_spatial.actor.loss import soft_grpo_policy_loss
        from soft_spatial.actor.train_engine import SoftFSDPEngine
        from soft_spatial.integration.platform import PlatformCPU
        from soft_spatial.rollout.replica import LocalSoftReplica
        from verl.trainer.ppo.core_algos import get_policy_loss_fn
        from verl.workers.engine.base import EngineRegistry
        from verl.workers.rollout.replica import RolloutReplicaRegistry
        from verl.workers.rollout.base import get_rollout_class

        first = snapshot()
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)  # register_engine warns on a clash
            plugin.register()
        assert snapshot() == first, "a second register() changed a registry"
        assert first["platform"] is PlatformCPU
        for backend in ("fsdp", "fsdp2"):
            assert EngineRegistry.get_engine_cls("soft_language_model", backend) is SoftFSDPEngine
            assert EngineRegistry.get_engine_cls("language_model", backend).__name__ == "FSDPEngineWithLMHead"
        assert get_policy_loss_fn("soft_grpo") is soft_grpo_policy_loss
        assert first["agents"]["soft_thinking_agent"] == {
            "_target_": "soft_spatial.rollout.agent_loop.SoftThinkingAgentLoop"}
        assert RolloutReplicaRegistry.get("local_soft") is LocalSoftReplica
        assert get_rollout_class("local_soft", "async").__name__ == "LocalSoftServerAdapter"
        assert first["adapters"][("sglang_soft", "async")].endswith("sglang_server.SGLangSoftServerAdapter")
        assert "sglang_soft" in first["replicas"]
        assert "sglang" not in sys.modules  # the sglang backend loads only when used
    """, VERL_PLATFORM="cpu")


def test_importing_the_registering_modules_registers_nothing():
    _run("""
        from soft_spatial.integration.platform import use_cpu_platform

        use_cpu_platform()  # what a CPU process calls before verl's engine modules import
        import soft_spatial.actor.loss
        import soft_spatial.actor.train_engine
        import soft_spatial.rollout.agent_loop
        import soft_spatial.rollout.replica

        s = snapshot()
        assert "soft_language_model" not in s["engines"]
        assert "soft_grpo" not in s["losses"]
        assert "soft_thinking_agent" not in s["agents"]
        assert "local_soft" not in s["replicas"] and ("local_soft", "async") not in s["adapters"]
    """, VERL_PLATFORM="cpu")
