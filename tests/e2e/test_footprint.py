"""The CPU preset sizes verl's worker pools for a small machine (issue: eight ~1 GB reward-loop
workers on a 2-core machine); the paper preset keeps verl's defaults."""
from hydra import compose, initialize_config_dir

from soft_spatial.train import CONFIG_DIR


def _pools(*overrides):
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
        cfg = compose(config_name="train", overrides=["model=tiny", *overrides])
    return (cfg.reward.num_workers, cfg.actor_rollout_ref.rollout.agent.num_workers,
            cfg.data.dataloader_num_workers)


def test_cpu_preset_sizes_pools_to_the_machine(monkeypatch):
    from soft_spatial import train

    for cores, want in ((1, 1), (2, 1), (7, 1), (8, 2), (16, 4), (64, 8)):
        monkeypatch.setattr(train.os, "sched_getaffinity", lambda pid, n=cores: set(range(n)))
        assert _pools("cluster=cpu") == (want, want, 0)  # one per 4 cores, 1 to 8


def test_paper_preset_keeps_verl_defaults_and_overrides_win():
    reward, agent, _ = _pools("cluster=paper")
    assert (reward, agent) == (8, 8)  # verl 0.9.1's reward/reward.yaml and rollout/rollout.yaml
    assert _pools("cluster=cpu", "reward.num_workers=2")[0] == 2
