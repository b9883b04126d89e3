"""Hydra entry point: ``python -m soft_spatial.eval benchmarks=[omnispatial,mindcube] mode=fixed``.

Config: configs/eval.yaml (composes the shared ``soft`` settings group; its ``soft`` block has the
shape of training's ``rollout.custom`` and is read as one
:class:`~soft_spatial.softthink.settings.SoftSettings`). ``model.path`` may be a directory written
by ``python -m soft_spatial.export``: its settings file and controller then apply unless given on
the command line (:func:`apply_exported`). Prints where the per-sample JSONL, the summary JSON and
the Markdown tables are.
"""
from __future__ import annotations

import dataclasses
import hashlib
import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path

import hydra
from omegaconf import DictConfig, OmegaConf, open_dict

from soft_spatial.infra.hydra_args import refuse_renamed
from soft_spatial.infra.hydra_record import hydra_record
from soft_spatial.infra.signals import command
from soft_spatial.models.loading import check_top_k, resolve_model_dir
from soft_spatial.softthink import AdaptSoft, AdaptSoftConfig
from soft_spatial.softthink.settings import CONTROLLER_FILE, SoftSettings

from soft_spatial.eval.runner import EvalConfig, evaluate

CONFIG_DIR = Path(__file__).resolve().parents[2] / "configs"


def model_slug(path: str) -> str:
    """``<directory name>-<6 hex of the absolute path>``: the default output directory names the
    model path, so two models never share one by default."""
    absolute = os.path.abspath(os.path.expanduser(str(path)))
    name = re.sub(r"[^A-Za-z0-9._-]+", "_", os.path.basename(absolute.rstrip("/")) or "model")
    return f"{name}-{hashlib.sha256(absolute.encode()).hexdigest()[:6]}"


OmegaConf.register_new_resolver("model_slug", model_slug, replace=True)


def selection_slug(limit, task_types) -> str:
    """``-limit<N>`` and ``-<task types>`` for a run that asks for a part of each benchmark, ""
    for a whole one: the default output directory names them, since they join the run key (a
    smoke run with ``limit`` and the full run after it get directories of their own)."""
    parts = [f"limit{limit}"] if limit is not None else []
    if task_types:
        names = [task_types] if isinstance(task_types, str) else list(task_types)
        parts.append(re.sub(r"[^A-Za-z0-9._+-]+", "_", "+".join(map(str, names))))
    return "".join(f"-{p}" for p in parts)


OmegaConf.register_new_resolver("selection_slug", selection_slug, replace=True)


def check_controller(cfg: DictConfig) -> None:
    """A controller checkpoint carries its own settings (tau0, delta, ...). An ``adaptsoft.*``
    value set away from the paper default (:class:`AdaptSoftConfig`'s) that disagrees with the
    checkpoint, or a controller given outside ``mode=adaptsoft``, would be ignored silently: both
    are errors."""
    if not cfg.controller:
        return
    if cfg.mode != "adaptsoft":
        raise ValueError(f"controller={cfg.controller} is used only by mode=adaptsoft (mode is "
                         f"{cfg.mode}); drop controller= or set mode=adaptsoft")
    if not Path(cfg.controller).is_file():
        raise FileNotFoundError(f"controller={cfg.controller}: no such file (the AdaptSoft "
                                f"checkpoint adaptsoft.pt of a training run or an exported model)")
    paper = dataclasses.asdict(AdaptSoftConfig())
    trained = dataclasses.asdict(AdaptSoft.read_checkpoint(cfg.controller).config)
    conflicts = [f"adaptsoft.{k}={v} (checkpoint: {trained[k]})"
                 for k, v in cfg.get("adaptsoft", {}).items()
                 if k in trained and k in paper and v != paper[k] and v != trained[k]]
    if conflicts:
        raise ValueError(f"the controller checkpoint {cfg.controller} was trained with other "
                         f"settings than {', '.join(conflicts)}; a checkpoint is evaluated with "
                         f"the settings it was trained with: drop these overrides")


def _overridden(overrides: Sequence[str]) -> set[str]:
    """Keys given on the command line (``key=value``, ``+key=value``, ``~key``)."""
    return {o.lstrip("+~").split("=", 1)[0] for o in overrides}


def apply_exported(cfg: DictConfig, overrides: Sequence[str] = ()) -> list[str]:
    """Fill the settings groups from an export at ``model.path`` (its ``soft_settings.yaml``, read
    with :meth:`SoftSettings.exported`), and its controller in adaptsoft mode, where the command
    line (``overrides``) did not set them: ``<group>.<key>=``, ``mode=`` (the mode), ``entropy=``
    (μ_H, σ_H), ``controller=`` (the controller and the ``adaptsoft`` settings it comes with).
    Returns the keys whose value changed, for the log."""
    model_dir = Path(str(cfg.model.path))
    exported = SoftSettings.exported(model_dir)
    given = _overridden(overrides)
    if "mode" in given:
        given.add("soft_thinking.mode")
    if "entropy" in given:
        given |= {"adaptsoft.entropy_mean", "adaptsoft.entropy_std"}
    taken = []
    with open_dict(cfg):
        for group, values in (exported.to_dict() if exported else {}).items():
            if group not in cfg.soft or (group == "adaptsoft" and "controller" in given):
                continue  # a rollout-server scalar; or the settings of another controller
            for key, value in values.items():
                if f"{group}.{key}" not in given and cfg[group].get(key) != value:
                    cfg[group][key] = value
                    taken.append(f"{group}.{key}")
        controller = model_dir / CONTROLLER_FILE
        if "controller" not in given and cfg.get("controller") is None and controller.is_file() \
                and cfg.mode == "adaptsoft":
            cfg.controller = str(controller)
            taken.append("controller")
    return taken


def soft_settings(cfg: DictConfig) -> SoftSettings:
    """The ``soft`` block as one SoftSettings; ``mode=`` (the top-level key) is its mode."""
    with open_dict(cfg):
        cfg.soft_thinking.mode = cfg.mode
    return SoftSettings.from_dict(OmegaConf.to_container(cfg.soft, resolve=True), where="soft")


def sample_top_k(cfg: DictConfig) -> int:
    """The discrete steps' top-k, ``sample_top_k``; the key's earlier name ``top_k`` (now K, the
    mixture's candidates, everywhere else: ``soft_thinking.top_k``) is still read, with a
    warning, and refused when it disagrees with ``sample_top_k`` given beside it."""
    old = cfg.get("top_k")
    if old is None:
        return cfg.sample_top_k
    given = {o.lstrip("+~").split("=", 1)[0] for o in _task_overrides()}
    if "sample_top_k" in given and old != cfg.sample_top_k:
        raise ValueError(f"top_k={old} and sample_top_k={cfg.sample_top_k}: top_k is the old name "
                         f"of sample_top_k (the discrete steps' top-k); give sample_top_k only")
    print(f"warning: top_k={old} is the old name of sample_top_k (the discrete steps' top-k; "
          f"K, the mixture's candidates, is soft_thinking.top_k): write sample_top_k={old}",
          file=sys.stderr)
    return old


def _task_overrides() -> list[str]:
    """The command line's overrides when Hydra runs (none when composed in code)."""
    from hydra.core.hydra_config import HydraConfig
    return list(HydraConfig.get().overrides.task) if HydraConfig.initialized() else []


def build_config(cfg: DictConfig) -> EvalConfig:
    """Typed EvalConfig from the composed Hydra tree (checks the model path, K against its
    vocabulary and the controller)."""
    settings = soft_settings(cfg)
    model_path = resolve_model_dir(cfg.model.path, build_tiny=bool(cfg.model.get("build_tiny")),
                                   tiny_family=cfg.model.get("tiny_family", "qwen3_vl"))
    check_top_k(settings.soft_thinking.top_k, model_path)  # before the model loads
    check_controller(cfg)
    published = OmegaConf.to_container(OmegaConf.load(CONFIG_DIR / "eval" / "published.yaml"))
    return EvalConfig(
        benchmarks=[cfg.benchmarks] if isinstance(cfg.benchmarks, str) else list(cfg.benchmarks),
        data=dict(cfg.data), model_path=str(model_path),
        model_name=cfg.model.name,
        soft_thinking=settings.soft_thinking,
        output_dir=cfg.output_dir, controller=cfg.controller, engine=cfg.engine,
        samples=cfg.samples, temperature=cfg.temperature, max_new_tokens=cfg.max_new_tokens,
        protocol=cfg.protocol, limit=cfg.limit, split=cfg.split, seed=cfg.seed,
        device=cfg.device, dtype=cfg.model.dtype, batch_rows=cfg.batch_rows,
        sglang=dict(OmegaConf.to_container(cfg.sglang, resolve=True) or {}), published=published,
        sample_top_k=sample_top_k(cfg), analysis_steps=cfg.analysis_steps,
        task_types=(OmegaConf.to_container(cfg.task_types) if OmegaConf.is_list(cfg.task_types)
                    else cfg.task_types))


@hydra.main(config_path=str(CONFIG_DIR), config_name="eval", version_base=None)
def main(cfg: DictConfig) -> None:
    from hydra.core.hydra_config import HydraConfig

    # an exported model directory carries its run's mode, controller and soft settings
    taken = apply_exported(cfg, HydraConfig.get().overrides.task)
    if taken:
        print(f"from {cfg.model.path}: {', '.join(taken)}")
    ecfg = build_config(cfg)
    # Hydra's record (configs/eval.yaml turns Hydra's own off), written once the run is accepted
    summaries = evaluate(ecfg, record=hydra_record(cfg))
    out = Path(ecfg.output_dir).resolve()
    for name, s in summaries.items():
        overall = "–" if s["overall"] is None else f"{s['overall']:.2f}"
        print(f"{name}: overall {overall}% over {s['samples']} samples "
              f"({s['questions']} questions); table {out / (name + '.md')}")
        if s["skipped_overlong"]:
            shown = ", ".join(s["skipped_overlong"][:20])
            per = ", ".join(f"{c} {k}" for c, k in s["requested"]["skipped_categories"].items())
            print(f"{name}: {len(s['skipped_overlong'])} question(s) skipped, prompt too long "
                  f"({per}): {shown}{' ...' if len(s['skipped_overlong']) > 20 else ''}")
        if s["left_out"]:
            print(f"{name}: {len(s['left_out'])} record(s) left out by the loader (listed in "
                  f"summary.json: left_out)")
    print(f"per-sample results: {out / 'samples.jsonl'}\nsummary: {out / 'summary.json'}")


if __name__ == "__main__":
    refuse_renamed(sys.argv[1:], "python -m soft_spatial.eval")  # the settings group's old name
    # SIGTERM (Slurm, timeout, kill) as Ctrl-C: the engine and its processes ended, the lock
    # released, every finished sample kept for the resume; exit 143 (130)
    with command("python -m soft_spatial.eval",
                 "every finished sample is kept; the same command resumes from them"):
        main()
