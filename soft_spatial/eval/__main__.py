"""Hydra entry point: ``python -m soft_spatial.eval benchmarks=[omnispatial,mindcube] mode=fixed``.

Config: configs/eval.yaml (composes the shared soft_thinking group). ``model.path`` may be a
directory written by ``python -m soft_spatial.export``: its mode, controller and soft-thinking
settings then apply unless given on the command line. Prints where the per-sample
JSONL, the summary JSON and the Markdown tables are.
"""
from __future__ import annotations

from pathlib import Path

import hydra
from omegaconf import DictConfig, OmegaConf

from soft_spatial.softthink import SoftThinkingConfig, from_mapping

from .runner import EvalConfig, evaluate

CONFIG_DIR = Path(__file__).resolve().parents[2] / "configs"


def build_config(cfg: DictConfig) -> EvalConfig:
    """Typed EvalConfig from the composed Hydra tree."""
    soft = dict(OmegaConf.to_container(cfg.soft_thinking, resolve=True))
    soft["mode"] = cfg.mode
    model_path = Path(cfg.model.path)
    if not model_path.exists() and cfg.model.get("build_tiny"):
        from soft_spatial.models import build_tiny_model
        print(f"building tiny {cfg.model.build_tiny} model at {model_path}")
        build_tiny_model(model_path, family=cfg.model.build_tiny, vocab="qwen")
    published = OmegaConf.to_container(OmegaConf.load(CONFIG_DIR / "eval" / "published.yaml"))
    return EvalConfig(
        benchmarks=list(cfg.benchmarks), data=dict(cfg.data), model_path=str(model_path),
        model_name=cfg.model.name, soft=from_mapping(SoftThinkingConfig, soft, "soft_thinking"),
        output_dir=cfg.output_dir, controller=cfg.controller, engine=cfg.engine,
        samples=cfg.samples, temperature=cfg.temperature, max_new_tokens=cfg.max_new_tokens,
        protocol=cfg.protocol, limit=cfg.limit, split=cfg.split, seed=cfg.seed,
        device=cfg.device, dtype=cfg.model.dtype, batch_rows=cfg.batch_rows,
        sglang=dict(OmegaConf.to_container(cfg.sglang, resolve=True) or {}), published=published,
        top_k=cfg.top_k, analysis_steps=cfg.analysis_steps,
        task_types=(OmegaConf.to_container(cfg.task_types) if OmegaConf.is_list(cfg.task_types)
                    else cfg.task_types))


@hydra.main(config_path=str(CONFIG_DIR), config_name="eval", version_base=None)
def main(cfg: DictConfig) -> None:
    from hydra.core.hydra_config import HydraConfig

    from soft_spatial.export import apply_exported

    # an exported model directory carries its run's mode, controller and soft settings
    taken = apply_exported(cfg, HydraConfig.get().overrides.task)
    if taken:
        print(f"from {cfg.model.path}: {', '.join(taken)}")
    ecfg = build_config(cfg)
    summaries = evaluate(ecfg)
    out = Path(ecfg.output_dir).resolve()
    for name, s in summaries.items():
        overall = "–" if s["overall"] is None else f"{s['overall']:.2f}"
        print(f"{name}: overall {overall}% over {s['samples']} samples "
              f"({s['questions']} questions); table {out / (name + '.md')}")
    print(f"per-sample results: {out / 'samples.jsonl'}\nsummary: {out / 'summary.json'}")


if __name__ == "__main__":
    main()
