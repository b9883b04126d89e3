"""``python -m soft_spatial.stats entropy [options] [train.yaml overrides ...]``

Estimates μ_H and σ_H (docs/design.md §2.4) from the initial policy: the training configuration
(``configs/train.yaml`` composed with the given Hydra overrides: model, data files, soft
settings, rollout temperature) decides the model, the prompts and the sampler, so the estimate
uses the same T, K and c as training. Writes ``configs/entropy/<name>.yaml`` (compose it with
``entropy=<name>``), a histogram PNG and the per-prompt entropies (resume) in ``--work-dir``.

Example::

    python -m soft_spatial.stats entropy --prompts 256 model=qwen3_vl_8b_thinking \\
        model.path=/models/Qwen3-VL-8B-Thinking data.train_files=data/omnispatial_train.parquet
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
from collections.abc import Sequence
from pathlib import Path

from soft_spatial.data.subsets import normalise_task_types
from soft_spatial.engines import LocalEngine
from soft_spatial.lab.paper.analysis.plotting import pyplot, save
from soft_spatial.lab.paper.calibration.entropy import (
    append_partial,
    config_text,
    estimate,
    parquet_prompts,
    read_partial,
    soft_step_entropies,
    usage_args,
)
from soft_spatial.infra.hydra_args import refuse_renamed
from soft_spatial.models.loading import resolve_model_dir
from soft_spatial.softthink import AdaptSoftConfig, SamplingConfig, SoftThinkingConfig, from_mapping
from soft_spatial.train import CONFIG_DIR


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m soft_spatial.stats",
                                description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    e = sub.add_parser("entropy", help="estimate mu_H and sigma_H from the initial policy",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    e.add_argument("--prompts", type=int, default=256, help="training prompts to decode (256)")
    e.add_argument("--samples", type=int, default=1, help="soft decodes per prompt (1)")
    e.add_argument("--max-new-tokens", type=int, default=None,
                   help="tokens per decode (default: data.max_response_length)")
    e.add_argument("--name", default=None, help="config name (default: model.name)")
    e.add_argument("--out", type=Path, default=None,
                   help="config file (default: configs/entropy/<name>.yaml)")
    e.add_argument("--work-dir", type=Path, default=None,
                   help="per-prompt entropies and histogram (default: runs/stats/entropy-<name>)")
    e.add_argument("--force", action="store_true", help="overwrite an existing config file")
    e.add_argument("--bins", type=int, default=20, help="histogram bins on [0, 1] (20)")
    e.add_argument("--batch-prompts", type=int, default=8, help="prompts decoded together (8)")
    e.add_argument("--device", default="cpu", help="torch device of the local engine (cpu)")
    e.add_argument("--seed", type=int, default=0)
    e.add_argument("--no-progress", action="store_true")
    e.add_argument("overrides", nargs="*", help="Hydra overrides of configs/train.yaml")
    return p


def compose_train(overrides: Sequence[str]):
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
        refuse_renamed(overrides, "python -m soft_spatial.stats entropy")
        return compose(config_name="train", overrides=list(overrides))


def entropy_main(args) -> Path:
    import torch
    from omegaconf import OmegaConf



    if args.prompts < 1 or args.samples < 1 or args.bins < 1:
        raise SystemExit("--prompts, --samples and --bins must be >= 1")
    cfg = compose_train(args.overrides)
    name = args.name or str(cfg.model.name)
    out = args.out or CONFIG_DIR / "entropy" / f"{name}.yaml"
    if out.exists() and not args.force:
        raise SystemExit(f"{out} exists (an earlier estimate); pass --force to overwrite it")
    work = args.work_dir or Path("runs") / "stats" / f"entropy-{name}"
    work.mkdir(parents=True, exist_ok=True)
    soft_cfg = dict(OmegaConf.to_container(cfg.soft_thinking, resolve=True))
    ada = from_mapping(AdaptSoftConfig, OmegaConf.to_container(cfg.adaptsoft, resolve=True),
                       "adaptsoft")
    soft_cfg.update(mode="fixed", fixed_tau=ada.tau0)  # the untrained controller's τ exactly
    soft_thinking = from_mapping(SoftThinkingConfig, soft_cfg, "soft_thinking")
    rollout = cfg.actor_rollout_ref.rollout
    top_k = int(rollout.top_k)
    sampling = SamplingConfig(temperature=float(rollout.temperature),
                              max_new_tokens=args.max_new_tokens or int(cfg.data.max_response_length),
                              top_k=max(0, top_k), top_p=float(rollout.top_p))
    files = cfg.data.train_files
    files = [files] if isinstance(files, str) else list(files)
    task_types = normalise_task_types(OmegaConf.to_container(cfg.data.task_types)
                                      if OmegaConf.is_list(cfg.data.task_types)
                                      else cfg.data.task_types)
    model_path = resolve_model_dir(str(cfg.actor_rollout_ref.model.path),
                                   build_tiny=bool(cfg.model.get("build_tiny")),
                                   tiny_family=cfg.model.get("tiny_family", "qwen3_vl"))
    prompts = parquet_prompts(files, args.prompts, seed=args.seed, task_types=task_types)
    settings = {"model": str(model_path), "train_files": [str(f) for f in files],
                "task_types": task_types, "top_k": soft_thinking.top_k,
                "noise_scale": soft_thinking.noise_scale,
                "temperature": sampling.temperature, "tau": soft_thinking.fixed_tau,
                "max_new_tokens": sampling.max_new_tokens, "samples": args.samples,
                "seed": args.seed}
    partial, saved = work / "entropies.jsonl", work / "settings.json"
    done = read_partial(partial)
    if done and saved.is_file() and json.loads(saved.read_text()) != settings:
        raise SystemExit(f"{work} holds entropies of other settings; remove it or pick "
                         f"another --work-dir")
    saved.write_text(json.dumps(settings, indent=2))
    print(f"decoding {len(prompts)} prompts x {args.samples} with K={soft_thinking.top_k}, "
          f"c={soft_thinking.noise_scale}, T={sampling.temperature}, tau={soft_thinking.fixed_tau} "
          f"({len(done)} done earlier)", flush=True)
    dtype = getattr(torch, str(cfg.model.get("dtype", "float32")))
    engine = LocalEngine.from_pretrained(model_path, device=args.device, dtype=dtype,
                                         max_batch_rows=args.batch_prompts * args.samples)
    ent = soft_step_entropies(engine, prompts, soft_thinking, sampling, samples=args.samples,
                              seed=args.seed, batch_prompts=args.batch_prompts, done=done,
                              on_prompt=lambda i, v: append_partial(partial, i, v),
                              progress=not args.no_progress)
    est = estimate(ent, bins=args.bins, settings=settings)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    usage = usage_args(out, CONFIG_DIR, est)  # what composes the file where it is
    tmp.write_text(config_text(est, name, usage), encoding="utf-8")
    os.replace(tmp, out)
    png = _histogram_png(est, work / "histogram.png")
    where = "" if usage[0].startswith(("entropy=", "--config-dir")) else (
        " (not composable as entropy=<name>: Hydra finds that only as entropy/<name>.yaml in a "
        "config directory; its values instead)")
    print(f"mu_H = {est.entropy_mean:.4f}, sigma_H = {est.entropy_std:.4f} over "
          f"{est.soft_steps} soft steps of {est.prompts} prompts (paper, Qwen3-VL-8B-Thinking: "
          f"0.173, 0.224)\nconfig: {out}{where}\n"
          f"use it (the first arguments of python -m soft_spatial.train or python -m "
          f"soft_spatial.eval, before other overrides): {shlex.join(usage)}\nhistogram: {png}")
    return out


def _histogram_png(est, path: Path) -> Path:

    fig, ax = pyplot().subplots(figsize=(5, 3.2))
    edges = est.histogram_edges
    ax.bar(edges[:-1], est.histogram_counts, width=[b - a for a, b in zip(edges, edges[1:])],
           align="edge", color="#4c72b0", edgecolor="white")
    ax.axvline(est.entropy_mean, color="k", lw=1, label=f"$\\mu_H$ = {est.entropy_mean:.3f}")
    ax.set_xlabel("normalised top-K entropy $\\hat H$")
    ax.set_ylabel("soft steps")
    ax.set_title(f"$\\sigma_H$ = {est.entropy_std:.3f}, {est.soft_steps} steps", fontsize=9)
    ax.legend(fontsize=8)
    return save(fig, path)


def main(argv: Sequence[str] | None = None):
    args = _parser().parse_args(argv)
    if args.command == "entropy":
        return entropy_main(args)
    raise SystemExit(f"unknown command {args.command!r}")  # pragma: no cover

