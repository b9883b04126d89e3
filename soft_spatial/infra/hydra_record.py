"""What Hydra's ``output_subdir`` would hold, for a command to write itself once its checks pass
(Hydra's own writing is off in ``configs/train.yaml`` and ``configs/eval.yaml``: it wrote before
any check, so a refused command changed the directory)."""
from __future__ import annotations

__all__ = ["hydra_record"]


def hydra_record(cfg, directory: str = "hydra") -> dict[str, str]:
    """``{DIRECTORY/config.yaml, hydra.yaml, overrides.yaml: text}``: the composed config as run,
    Hydra's own config and the command-line overrides. Call inside the Hydra app."""
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import OmegaConf

    hydra_cfg = HydraConfig.get()
    return {f"{directory}/config.yaml": OmegaConf.to_yaml(cfg),
            f"{directory}/hydra.yaml": OmegaConf.to_yaml(OmegaConf.create({"hydra": hydra_cfg})),
            f"{directory}/overrides.yaml": OmegaConf.to_yaml(hydra_cfg.overrides.task)}
