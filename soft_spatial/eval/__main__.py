"""Hydra entry point: ``python -m soft_spatial.eval benchmarks=[omnispatial,mindcube] mode=fixed``.

Config: configs/eval.yaml (composes the shared soft_thinking group). ``model.path`` may be a
directory written by ``python -m soft_spatial.export``: its mode, controller and soft-thinking
settings then apply unless given on the command line. Prints where the per-sample
JSONL, the summary JSON and the Markdown tables are.
"""
from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

import hydra
from omegaconf import DictConfig, OmegaConf

from soft_spatial.models.loading import resolve_model_dir
from soft_spatial.softthink import AdaptSoft, SoftThinkingConfig, from_mapping

from soft_spatial.eval.runner import EvalConfig, evaluate

CONFIG_DIR = Path(__file__).resolve().parents[2] / "configs"


def model_slug(path: str) -> str:
    """``<directory name>-<6 hex of the absolute path>``: the default output directory names the
    model path, so two models never share one by default."""
    absolute = os.path.abspath(os.path.expanduser(str(path)))
    name = re.sub(r"[^A-Za-z0-9._-]+", "_", os.path.basename(absolute.rstrip("/")) or "model")
    return f"{name}-{hashlib.sha256(absolute.encode()).hexdigest()[:6]}"


OmegaConf.register_new_resolver("model_slug", model_slug, replace=True)


def check_controller(cfg: DictConfig) -> None:
    """A controller checkpoint carries its own settings (tau0, delta, ...). An ``adaptsoft.*``
    value set away from the paper default that disagrees with the checkpoint, or a controller
    given outside ``mode=adaptsoft``, would be ignored silently: both are errors."""
    if not cfg.controller:
        return
    if cfg.mode != "adaptsoft":
        raise ValueError(f"controller={cfg.controller} is used only by mode=adaptsoft (mode is "
                         f"{cfg.mode}); drop controller= or set mode=adaptsoft")
    if not Path(cfg.controller).is_file():
        raise FileNotFoundError(f"controller={cfg.controller}: no such file (the AdaptSoft "
                                f"checkpoint adaptsoft.pt of a training run or an exported model)")
    paper = OmegaConf.load(CONFIG_DIR / "soft_thinking" / "paper.yaml").adaptsoft
    trained = AdaptSoft.read_checkpoint(cfg.controller)["config"]
    conflicts = [f"adaptsoft.{k}={v} (checkpoint: {trained[k]})"
                 for k, v in cfg.get("adaptsoft", {}).items()
                 if k in trained and k in paper and v != paper[k] and v != trained[k]]
    if conflicts:
        raise ValueError(f"the controller checkpoint {cfg.controller} was trained with other "
                         f"settings than {', '.join(conflicts)}; a checkpoint is evaluated with "
                         f"the settings it was trained with: drop these overrides")


def build_config(cfg: DictConfig) -> EvalConfig:
    """Typed EvalConfig from the composed Hydra tree (checks the model path and the controller)."""
    soft_thinking = dict(OmegaConf.to_container(cfg.soft_thinking, resolve=True))
    soft_thinking["mode"] = cfg.mode
    model_path = resolve_model_dir(cfg.model.path, build_tiny=bool(cfg.model.get("build_tiny")),
                                   tiny_family=cfg.model.get("tiny_family", "qwen3_vl"))
    check_controller(cfg)
    published = OmegaConf.to_container(OmegaConf.load(CONFIG_DIR / "eval" / "published.yaml"))
    return EvalConfig(
        benchmarks=[cfg.benchmarks] if isinstance(cfg.benchmarks, str) else list(cfg.benchmarks),
        data=dict(cfg.data), model_path=str(model_path),
        model_name=cfg.model.name,
        soft_thinking=from_mapping(SoftThinkingConfig, soft_thinking, "soft_thinking"),
        output_dir=cfg.output_dir, controller=cfg.controller, engine=cfg.engine,
        samples=cfg.samples, temperature=cfg.temperature, max_new_tokens=cfg.max_new_tokens,
        protocol=cfg.protocol, limit=cfg.limit, split=cfg.split, seed=cfg.seed,
        device=cfg.device, dtype=cfg.model.dtype, batch_rows=cfg.batch_rows,
        sglang=dict(OmegaConf.to_container(cfg.sglang, resolve=True) or {}), published=published,
        top_k=cfg.top_k, analysis_steps=cfg.analysis_steps,
        task_types=(OmegaConf.to_container(cfg.task_types) if OmegaConf.is_list(cfg.task_types)
                    else cfg.task_types))


def hydra_record(cfg: DictConfig) -> dict[str, str]:
    """What Hydra's ``output_subdir`` would hold (the composed config as run, after an exported
    model's settings, Hydra's own config and the command-line overrides), for `evaluate` to write
    into the output directory once the run is accepted (configs/eval.yaml turns Hydra's off)."""
    from hydra.core.hydra_config import HydraConfig

    hydra_cfg = HydraConfig.get()
    return {"hydra/config.yaml": OmegaConf.to_yaml(cfg),
            "hydra/hydra.yaml": OmegaConf.to_yaml(OmegaConf.create({"hydra": hydra_cfg})),
            "hydra/overrides.yaml": OmegaConf.to_yaml(hydra_cfg.overrides.task)}


@hydra.main(config_path=str(CONFIG_DIR), config_name="eval", version_base=None)
def main(cfg: DictConfig) -> None:
    from hydra.core.hydra_config import HydraConfig

    from soft_spatial.export import apply_exported

    # an exported model directory carries its run's mode, controller and soft settings
    taken = apply_exported(cfg, HydraConfig.get().overrides.task)
    if taken:
        print(f"from {cfg.model.path}: {', '.join(taken)}")
    ecfg = build_config(cfg)
    summaries = evaluate(ecfg, record=hydra_record(cfg))
    out = Path(ecfg.output_dir).resolve()
    for name, s in summaries.items():
        overall = "–" if s["overall"] is None else f"{s['overall']:.2f}"
        print(f"{name}: overall {overall}% over {s['samples']} samples "
              f"({s['questions']} questions); table {out / (name + '.md')}")
        if s["skipped_overlong"]:
            shown = ", ".join(s["skipped_overlong"][:20])
            print(f"{name}: {len(s['skipped_overlong'])} question(s) skipped, prompt too long: "
                  f"{shown}{' ...' if len(s['skipped_overlong']) > 20 else ''}")
    print(f"per-sample results: {out / 'samples.jsonl'}\nsummary: {out / 'summary.json'}")


if __name__ == "__main__":
    main()
