"""The benchmark on disk, in the OmniSpatial release layout: both splits (``data.json`` written last,
its presence marking a finished split, and one PNG per question under its task type), the
README (tasks, knobs, chance levels, the path tasks' audited shortcuts), and the readers of a
written split."""
from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from soft_spatial.data.synthetic.config import ALL_TASKS, PATH_TASKS, SyntheticConfig
from soft_spatial.data.synthetic.item import Item
from soft_spatial.data.synthetic.paths import PATH_SHORTCUTS, path_shortcut_accuracy
from soft_spatial.data.synthetic.split import chance_levels, generate_split


def chance_levels_of_release(release: str | Path) -> dict[str, float]:
    """`chance_levels` of a written split, from its ``data.json``."""
    rows = json.loads((Path(release) / "data.json").read_text(encoding="utf-8"))
    per: dict[str, list[float]] = defaultdict(list)
    for r in rows:
        per[r["synthetic_task"]].append(1.0 / len(r["options"]))
    out = {t: 100.0 * sum(v) / len(v) for t, v in per.items()}
    out["overall"] = 100.0 * sum(sum(v) for v in per.values()) / max(1, len(rows))
    return out


def _write_release(release: Path, items: Sequence[Item], cfg: SyntheticConfig) -> None:
    release.mkdir(parents=True, exist_ok=True)
    data = []
    for image_no, it in enumerate(items):
        task_type, sub = ALL_TASKS[it.task]
        path = release / task_type / f"{image_no}.png"
        path.parent.mkdir(parents=True, exist_ok=True)
        it.image.save(path)
        data.append({"id": f"{image_no}_0", "question": it.question, "options": it.options,
                     "answer": it.answer, "task_type": task_type, "sub_task_type": sub,
                     "synthetic_task": it.task, "difficulty": cfg.difficulty_name,
                     "reasoning": it.reasoning, **it.extra})
    tmp = release / "data.json.tmp"
    tmp.write_text(json.dumps(data, indent=1), encoding="utf-8")
    tmp.replace(release / "data.json")  # data.json last: its presence marks a finished split


def write_benchmark(out: str | Path, train: int, test: int, seed: int = 0,
                    cfg: SyntheticConfig | None = None) -> dict[str, dict[str, float]]:
    """Write both splits and ``README.md`` under ``out``; returns the chance levels per split."""
    cfg = cfg or SyntheticConfig()
    out = Path(out)
    seen: set = set()
    train_items = generate_split(train, seed, "train", cfg, seen)
    test_items = generate_split(test, seed, "test", cfg, set(seen))
    _write_release(out / "OmniSpatial-train", train_items, cfg)
    _write_release(out / "OmniSpatial-test", test_items, cfg)
    chance = {"train": chance_levels(train_items), "test": chance_levels(test_items)}
    (out / "README.md").write_text(_readme(cfg, seed, train_items, test_items, chance),
                                   encoding="utf-8")
    return chance


def _readme(cfg, seed, train_items, test_items, chance) -> str:
    letters = Counter("ABCD"[it.answer] for it in train_items + test_items)
    rows = "\n".join(f"| {t} | {ALL_TASKS[t][0]} / {ALL_TASKS[t][1]} | "
                     f"{sum(it.task == t for it in test_items)} | {chance['test'].get(t, 0):.1f}% |"
                     for t in cfg.tasks)
    return (f"# Synthetic spatial benchmark (seed {seed}, difficulty {cfg.difficulty_name})\n\n"
            f"Written by `python -m soft_spatial.data.synthetic`; OmniSpatial release layout.\n"
            f"Train {len(train_items)} questions, test {len(test_items)} (disjoint), images "
            f"{cfg.size}x{cfg.size} ({cfg.layout} layout"
            f"{', scene described in words' if cfg.describe else ''}), options per question "
            f"{list(cfg.options)} in {cfg.option_order} order.\n"
            f"Knobs: {json.dumps(asdict(cfg.difficulty))}.\n"
            f"Answer letters over both splits: {dict(sorted(letters.items()))}.\n\n"
            f"| task | OmniSpatial type | test questions | chance |\n|---|---|---|---|\n{rows}\n"
            f"| overall | | {len(test_items)} | {chance['test']['overall']:.1f}% |\n"
            + _path_readme(cfg, train_items, test_items))


def _path_readme(cfg, train_items, test_items) -> str:
    if not any(t in PATH_TASKS for t in cfg.tasks):
        return ""
    acc = {"train": path_shortcut_accuracy(train_items), "test": path_shortcut_accuracy(test_items)}
    lines = [f"\nPath tasks: {json.dumps(asdict(cfg.paths))}. Audited shortcuts, accuracy % "
             f"(chance: 1/m for a start, 25 for a quarter):\n",
             "| split | task | " + " | ".join(n for n, _ in PATH_SHORTCUTS) + " |",
             "|---|---|" + "---|" * len(PATH_SHORTCUTS)]
    for split, per in acc.items():
        for task, row in per.items():
            lines.append(f"| {split} | {task} | " + " | ".join(
                f"{row[n]:.1f}" if n in row else "-" for n, _ in PATH_SHORTCUTS) + " |")
    return "\n".join(lines) + "\n"



def read_rows(release: str | Path) -> dict[str, dict]:
    """``{id: row}``: every field of a written split's records (its ``data.json``), the path
    questions' ground truth (moves, branches, true branch, t*) included."""
    rows = json.loads((Path(release) / "data.json").read_text(encoding="utf-8"))
    return {r["id"]: r for r in rows}


def read_reasoning(release: str | Path) -> dict[str, dict]:
    """``{id: {"task", "reasoning"}}`` of a written split (its ``data.json``)."""
    return {k: {"task": r["synthetic_task"], "reasoning": r["reasoning"]}
            for k, r in read_rows(release).items()}
