"""μ_H and σ_H: the standardisation of AdaptSoft's entropy feature (docs/design.md §2.4).

The paper estimates them "once from the next-token entropies of the initial policy". Here the
initial policy decodes N training prompts with the soft sampler exactly as the first training
rollouts do: the same K, noise scale c and sampling temperature T, and τ = τ₀ (the untrained
controller outputs τ₀ exactly, so fixed-soft decoding at τ₀ *is* the initial adaptive policy).
At every soft step the normalised top-K entropy Ĥ = −Σ_k p̃_k log p̃_k / log K is recorded by the
sampler (:func:`~soft_spatial.softthink.normalized_entropy`); μ_H and σ_H are their mean and
(population) standard deviation over all soft steps of all prompts.

The result is a Hydra config ``configs/entropy/<name>.yaml`` that sets ``adaptsoft.entropy_mean``
and ``adaptsoft.entropy_std`` (with the histogram and the settings as provenance), composed by
``python -m soft_spatial.train entropy=<name>`` and ``python -m soft_spatial.eval entropy=<name>``.
"""
from __future__ import annotations

import base64
import io
import json
import os
import re
import shlex
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from soft_spatial.data.subsets import matches
from soft_spatial.eval.runner import read_results

__all__ = ["EntropyEstimate", "parquet_prompts", "soft_step_entropies", "estimate",
           "config_text", "usage_args", "IMAGE_PLACEHOLDER"]

IMAGE_PLACEHOLDER = "<image>"


@dataclass
class EntropyEstimate:
    """μ_H, σ_H and how they were obtained."""

    entropy_mean: float
    entropy_std: float
    soft_steps: int
    prompts: int
    histogram_edges: list[float]
    histogram_counts: list[int]
    settings: dict[str, object] = field(default_factory=dict)


def _chat(row: dict, where: str) -> list:
    """verl parquet ``prompt`` + ``images`` → a chat with image items (``<image>`` placeholders
    in the text mark where each image goes, in order)."""
    from PIL import Image

    images = [Image.open(io.BytesIO(im["bytes"])).convert("RGB") for im in row.get("images") or []]
    chat, used = [], 0
    for m in row["prompt"]:
        text = m["content"]
        if IMAGE_PLACEHOLDER not in text:
            chat.append({"role": m["role"], "content": text})
            continue
        parts = text.split(IMAGE_PLACEHOLDER)
        content = []
        for j, part in enumerate(parts):
            if j:
                if used >= len(images):
                    raise ValueError(f"{where}: more {IMAGE_PLACEHOLDER} placeholders than images")
                content.append({"type": "image", "image": images[used]})
                used += 1
            if part:
                content.append({"type": "text", "text": part})
        chat.append({"role": m["role"], "content": content})
    if used != len(images):
        raise ValueError(f"{where}: {len(images)} images but {used} {IMAGE_PLACEHOLDER} "
                         f"placeholders")
    return chat


def parquet_prompts(files: Iterable, n: int, seed: int = 0,
                    task_types: Sequence[str] | None = None) -> list[list]:
    """``n`` chats drawn (seeded, without replacement) from verl training parquet ``files``
    (optionally only ``task_types``); fewer if the files hold fewer rows."""
    import pyarrow.parquet as pq


    rows = []
    for f in files:
        path = Path(f)
        if not path.is_file():
            raise FileNotFoundError(f"training parquet not found: {path}")
        table = pq.read_table(path)
        for col in ("prompt", "images"):
            if col not in table.column_names:
                raise ValueError(f"{path}: no {col!r} column (write it with "
                                 f"python -m soft_spatial.data.prepare)")
        for i, row in enumerate(table.to_pylist()):
            extra = row.get("extra_info") or {}
            if matches(extra.get("task_type"), extra.get("sub_task_type"), task_types):
                rows.append((f"{path}: row {i}", row))
    if not rows:
        raise ValueError(f"no training prompts in {list(map(str, files))}"
                         + (f" of task types {list(task_types)}" if task_types else ""))
    order = np.random.default_rng(seed).permutation(len(rows))[:n]
    return [_chat(rows[j][1], rows[j][0]) for j in order]


def soft_step_entropies(engine, prompts: Sequence, soft_thinking, sampling, samples: int = 1,
                        seed: int = 0, batch_prompts: int = 8, done: dict | None = None,
                        on_prompt=None, progress: bool = True) -> dict[int, np.ndarray]:
    """Ĥ at every soft step of ``samples`` soft decodes of each prompt, by prompt index.

    ``done`` holds prompts finished earlier (skipped, resume); ``on_prompt(i, entropies)`` is
    called as each prompt finishes (to persist it). Prompt i uses seed ``seed + i``.
    """
    out = dict(done or {})
    todo = [i for i in range(len(prompts)) if i not in out]
    bar = None
    if progress:
        from tqdm.auto import tqdm
        bar = tqdm(total=len(prompts), initial=len(prompts) - len(todo), desc="entropy",
                   unit="prompt")
    for s in range(0, len(todo), batch_prompts):
        idx = todo[s:s + batch_prompts]
        outs = engine.generate([prompts[i] for i in idx], soft_thinking=soft_thinking,
                               sampling=sampling, n=samples, seeds=[seed + i for i in idx])
        per: dict[int, list] = {i: [] for i in idx}
        for o in outs:
            per[idx[o.prompt_index]].append(o.trace.entropy[o.trace.soft].double().numpy())
        for i in idx:
            out[i] = np.concatenate(per[i]) if per[i] else np.zeros(0)
            if on_prompt is not None:
                on_prompt(i, out[i])
        if bar is not None:
            bar.update(len(idx))
    if bar is not None:
        bar.close()
    return out


def estimate(entropies: dict[int, np.ndarray], bins: int = 20,
             settings: dict[str, object] | None = None) -> EntropyEstimate:
    """μ_H, σ_H (population std) and a histogram on [0, 1] over all soft steps."""
    values = np.concatenate([entropies[i] for i in sorted(entropies)]) if entropies else []
    values = np.asarray(values, dtype=np.float64)
    if values.size == 0:
        raise ValueError("no soft steps were decoded: the initial policy closed its chain of "
                         "thought at once on every prompt, or max_new_tokens is 0")
    counts, edges = np.histogram(values, bins=bins, range=(0.0, 1.0))
    return EntropyEstimate(float(values.mean()), float(values.std()), int(values.size),
                           len(entropies), [round(float(e), 6) for e in edges],
                           [int(c) for c in counts], dict(settings or {}))


def usage_args(out: str | os.PathLike, config_dir: str | os.PathLike,
               est: EntropyEstimate | None = None) -> list[str] | None:
    """The arguments of ``python -m soft_spatial.train`` (or ``soft_spatial.eval``) that use the
    config file ``out``: ``entropy=<stem>`` in ``config_dir/entropy/`` (the package's configs);
    ``--config-dir <dir> entropy=<stem>`` in any other ``<dir>/entropy/`` (Hydra finds an
    ``entropy=`` option only as ``entropy/<option>.yaml`` on its search path); elsewhere, given
    ``est``, its values as ``adaptsoft.entropy_mean=... adaptsoft.entropy_std=...`` (None without)."""
    path = Path(out).resolve()
    if path.suffix == ".yaml" and path.parent.name == "entropy" and re.fullmatch(r"[\w-]+", path.stem):
        option = [f"entropy={path.stem}"]
        if path.parent == (Path(config_dir) / "entropy").resolve():
            return option
        return ["--config-dir", str(path.parent.parent)] + option
    if est is None:
        return None
    return [f"adaptsoft.entropy_mean={round(est.entropy_mean, 6)}",
            f"adaptsoft.entropy_std={round(est.entropy_std, 6)}"]


def config_text(est: EntropyEstimate, name: str, usage: Sequence[str] | None = None) -> str:
    """The Hydra config file for ``configs/entropy/<name>.yaml``; ``usage``: the command-line
    arguments that compose it (`usage_args`; default ``entropy=<name>``)."""
    import yaml

    s = est.settings
    args = shlex.join(usage if usage is not None else [f"entropy={name}"])
    head = (f"# @package _global_\n"
            f"# mu_H and sigma_H for {s.get('model', name)}: the normalised top-K entropy at every "
            f"soft step of the\n# initial policy (python -m soft_spatial.stats entropy), "
            f"{est.prompts} training prompts, {est.soft_steps} soft steps.\n"
            f"# Compose: python -m soft_spatial.train {args} | python -m soft_spatial.eval "
            f"{args}\n")
    body = {"adaptsoft": {"entropy_mean": round(est.entropy_mean, 6),
                          "entropy_std": round(est.entropy_std, 6)},
            "entropy_estimate": {  # provenance only; the method reads adaptsoft.* above
                **{k: v for k, v in asdict(est).items()
                   if k not in ("entropy_mean", "entropy_std", "settings")},
                "settings": s}}
    return head + yaml.safe_dump(body, sort_keys=False, default_flow_style=None, width=100)


# -- resumable per-prompt record ------------------------------------------------------------------
def read_partial(path: Path) -> dict[int, np.ndarray]:
    """Prompts finished by an earlier run (one JSON line each; a torn last line is dropped)."""

    return {int(row["prompt"]): np.frombuffer(base64.b64decode(row["entropy"]), dtype="<f8")
            for row in read_results(path)}


def append_partial(path: Path, i: int, values: np.ndarray) -> None:
    with path.open("a", encoding="utf-8") as f:
        f.write(json.dumps({"prompt": i, "entropy": base64.b64encode(
            np.asarray(values, dtype="<f8").tobytes()).decode("ascii")}) + "\n")
        f.flush()
        os.fsync(f.fileno())
