"""``python -m soft_spatial.ablation``: the paper's Table 4 in one command.

For every row of ``configs/ablation/table4.yaml`` (AdaptSoft and its four ablations) the sweep

1. trains on the task-type subset: ``python -m soft_spatial.train experiment=<row>
   data.task_types=[Perspective_Taking] trainer.default_local_dir=<out>/<row>/train ...``;
2. merges the last checkpoint into a Hugging Face directory (``verl.model_merger``);
3. evaluates it on the same subset of the test split: ``python -m soft_spatial.eval
   task_types=[Perspective_Taking] mode=<the preset's mode> controller=<its AdaptSoft> ...``;

then writes ``<out>/table4.md`` in the paper's layout (Avg., Egocentric, Allocentric,
Hypothetical; ours with the paper's number in brackets) and ``<out>/table4.json``. Every stage
logs to ``<out>/<row>/<stage>.log`` and is skipped when already done, so an interrupted sweep
resumes where it stopped (training itself resumes from its checkpoints, evaluation from its
samples). ``--dry-run`` prints the commands. Each stage's command is tethered to the sweep
(``infra/tether.py``): SIGTERM, SIGINT or SIGHUP to the sweep (or its SIGKILL) ends the stage and
everything it started, the run directory's lock released, and the sweep exits 128 + the signal.

A row's training is done only if these settings made it: ``<row>/train.done`` holds its key
(`RowRun.train_key`: training's own run key, `soft_spatial.train.run_key`, of the row's composed
configuration, the base model's fingerprint and the data's digests included, and the budget
``trainer.total_training_steps``). Before any row runs, every row's recorded key is compared with
this command's: another one (more steps, another model, other data, another learning rate) is
refused naming each difference, and nothing runs, so Table 4 never shows one policy's numbers
under another's settings.

Example (the paper run; data paths as for training and evaluation)::

    python -m soft_spatial.ablation --out runs/table4 \\
        --override model=qwen3_vl_8b_thinking \\
        --train-override model.path=/models/Qwen3-VL-8B-Thinking \\
        --train-override data.train_files=data/omnispatial_train.parquet \\
        --train-override data.val_files=data/omnispatial_test.parquet \\
        --eval-override data.omnispatial=/data/OmniSpatial
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from collections.abc import Sequence

from soft_spatial.infra import tether
from soft_spatial.infra.dirlock import NotADirectoryOutput, check_dir_path
from soft_spatial.infra.hydra_args import refuse_renamed
from soft_spatial.infra.provenance import Keyed, OutputKeyMismatch, Verdict
from soft_spatial.infra.run_dir import latest_step
from soft_spatial.infra.signals import command
from soft_spatial.models.loading import resolve_model_dir
from soft_spatial.train import CONFIG_DIR, run_key

__all__ = ["Sweep", "Row", "load_sweep", "row_result", "table_markdown", "main"]

DEFAULT_CONFIG = CONFIG_DIR / "ablation" / "table4.yaml"


@dataclass
class Row:
    key: str
    name: str
    experiment: str
    paper: dict[str, float | None] = field(default_factory=dict)


@dataclass
class Sweep:
    benchmark: str
    task_types: list[str]
    columns: list[str]
    rows: list[Row]


def load_sweep(path=DEFAULT_CONFIG) -> Sweep:
    """The sweep definition; a missing or malformed field is an error naming file and field."""
    import yaml

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"ablation config not found: {path}")
    raw = yaml.safe_load(path.read_text()) or {}

    def need(d, key, where):
        if key not in d or d[key] in (None, "", []):
            raise ValueError(f"{path}: {where}missing field {key!r}")
        return d[key]

    rows = []
    for i, r in enumerate(need(raw, "rows", "")):
        where = f"rows[{i}]: "
        if not isinstance(r, dict):
            raise ValueError(f"{path}: {where}expected a mapping, got {r!r}")
        preset = CONFIG_DIR / "experiment" / f"{need(r, 'experiment', where)}.yaml"
        if not preset.is_file():
            raise ValueError(f"{path}: {where}experiment {r['experiment']!r} is not a preset in "
                             f"{preset.parent}")
        rows.append(Row(str(need(r, "key", where)), str(need(r, "name", where)),
                        str(r["experiment"]), dict(r.get("paper") or {})))
    keys = [r.key for r in rows]
    if len(set(keys)) != len(keys):
        raise ValueError(f"{path}: rows: duplicate keys in {keys}")
    return Sweep(str(need(raw, "benchmark", "")), [str(t) for t in need(raw, "task_types", "")],
                 [str(c) for c in need(raw, "columns", "")], rows)


def _compose_train(overrides: Sequence[str]):
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
        refuse_renamed(overrides, "python -m soft_spatial.ablation")
        return compose(config_name="train", overrides=list(overrides))


def _list(xs: Sequence[str]) -> str:
    return "[" + ",".join(xs) + "]"


class RowRun:
    """Commands and outputs of one row."""

    def __init__(self, sweep: Sweep, row: Row, out: Path, overrides, train_overrides,
                 eval_overrides, python: str = sys.executable):
        self.row, self.dir, self.python = row, out / row.key, python
        self.train_dir, self.model_dir = self.dir / "train", self.dir / "model"
        self.eval_dir = self.dir / "eval"
        self.train_args = [*overrides, *train_overrides, f"experiment={row.experiment}",
                           f"data.task_types={_list(sweep.task_types)}",
                           f"trainer.default_local_dir={self.train_dir}",
                           f"trainer.experiment_name=table4-{row.key}"]
        self.cfg = cfg = _compose_train(self.train_args)
        self.mode = str(cfg.soft_thinking.mode)
        self.steps = int(cfg.trainer.total_training_steps)
        self.eval_args = [*overrides, *eval_overrides, f"benchmarks=[{sweep.benchmark}]",
                          f"task_types={_list(sweep.task_types)}", f"mode={self.mode}",
                          f"model.path={self.model_dir}", f"output_dir={self.eval_dir}",
                          f"model.name=table4-{row.key}"]

    def train_key(self) -> dict:
        """The key of the row's training: `soft_spatial.train.run_key` of its composed
        configuration (the model built first where ``model.build_tiny=true`` asks, as training
        would) and its budget."""
        model = self.cfg.actor_rollout_ref.model.path
        resolve_model_dir(model, build_tiny=bool(self.cfg.model.get("build_tiny")),
                          tiny_family=self.cfg.model.get("tiny_family", "qwen3_vl"))
        key = run_key(self.cfg)
        key["settings"]["trainer.total_training_steps"] = self.steps
        return key

    def done(self, key: dict) -> Keyed:
        """``train.done``: the row's finished training, the marker its key (`train_key`)."""
        done = self.dir / "train.done"
        return Keyed(f"{self.row.key}: the training", done, key, at=done, hint=(
            f"Train these settings into another --out, or remove {self.dir} to train the row "
            f"again; nothing was changed"))

    def trained(self, key: dict) -> bool:
        """Whether ``train.done`` holds ``key`` (False: no training recorded yet); a key of other
        settings, or a marker without one, is refused naming it (`OutputKeyMismatch`)."""
        done = self.done(key)
        try:
            return done.verdict() is Verdict.SAME
        except OutputKeyMismatch:  # a key of other settings, or a marker that is no key
            if not done.output.read_text(encoding="utf-8", errors="replace").lstrip().startswith("{"):
                raise OutputKeyMismatch(f"{done.output} holds no key (written by an earlier version): "
                                        f"which settings trained {self.train_dir} is unknown. "
                                        f"{done.hint}") from None
            raise

    def train_cmd(self) -> list[str]:
        return [self.python, "-m", "soft_spatial.train", *self.train_args]

    def actor_dir(self) -> Path:
        marker = self.train_dir / "latest_checkpointed_iteration.txt"
        if not marker.is_file():
            raise FileNotFoundError(f"{marker}: training left no checkpoint (it must save: "
                                    f"trainer.save_freq > 0)")
        return self.train_dir / f"global_step_{marker.read_text().strip()}" / "actor"

    def merge_cmd(self, actor: Path | None = None) -> list[str]:
        actor = actor or self.train_dir / "global_step_<last>" / "actor"
        return [self.python, "-m", "verl.model_merger", "merge", "--backend", "fsdp",
                "--local_dir", str(actor), "--target_dir", str(self.model_dir)]

    def eval_cmd(self, actor: Path | None = None) -> list[str]:
        args = list(self.eval_args)
        if self.mode == "adaptsoft":
            actor = actor or self.train_dir / "global_step_<last>" / "actor"
            args.append(f"controller={actor / 'adaptsoft.pt'}")
        return [self.python, "-m", "soft_spatial.eval", *args]


def _run(cmd: list[str], log: Path, what: str, env: dict | None = None) -> None:
    log.parent.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, **(env or {}))
    with log.open("a", encoding="utf-8") as f:
        f.write("$ " + " ".join(cmd) + "\n")
        f.flush()
        res = tether.run(cmd, stdout=f, stderr=f, env=env)  # ends with the sweep
    if res.returncode != 0:
        raise RuntimeError(f"{what} failed (exit {res.returncode}); log {log}:\n{tether.log_tail(log)}")


def run_row(r: RowRun, progress=print, key: dict | None = None) -> None:
    """Train, merge and evaluate one row, skipping the stages already done (training: only when
    ``train.done`` holds this row's ``key``, `RowRun.train_key`)."""
    key = key if key is not None else r.train_key()
    if not r.trained(key):
        progress(f"  training ({r.steps} steps, log {r.dir / 'train.log'})")
        _run(r.train_cmd(), r.dir / "train.log", f"{r.row.key}: training")
        step = latest_step(r.train_dir)
        if step != r.steps:  # a run trained further by an earlier command: not this row's policy
            raise OutputKeyMismatch(
                f"{r.row.key}: {r.train_dir} holds the checkpoint of step {step}, not of "
                f"trainer.total_training_steps={r.steps}: its policy is not this row's. Train into "
                f"another --out, or remove {r.dir}")
        r.done(key).record()
    actor = r.actor_dir()
    merged = r.dir / "merge.done"
    if not merged.is_file() or merged.read_text().strip() != str(actor):
        progress(f"  merging {actor}")
        # verl's merger needs its CPU platform where there is no GPU
        _run(r.merge_cmd(actor), r.dir / "merge.log", f"{r.row.key}: merging",
             env=None if _has_cuda() else {"VERL_PLATFORM": "cpu"})
        merged.write_text(str(actor) + "\n")
    progress(f"  evaluating (log {r.dir / 'eval.log'})")
    _run(r.eval_cmd(actor), r.dir / "eval.log", f"{r.row.key}: evaluation")


def _has_cuda() -> bool:
    try:
        import torch
        return torch.cuda.is_available()
    except Exception:  # pragma: no cover
        return False


def row_result(summary_path: Path, sweep: Sweep) -> dict | None:
    """{"avg": …, <column>: …} from an evaluation's summary.json (None if not there yet)."""
    if not summary_path.is_file():
        return None
    data = json.loads(summary_path.read_text())
    try:
        s = data["benchmarks"][sweep.benchmark]
    except KeyError:
        raise ValueError(f"{summary_path}: no results for benchmark {sweep.benchmark!r}") from None
    subs = s.get("subcategories", {})
    out = {"avg": s.get("overall"), "samples": s.get("samples")}
    for c in sweep.columns:
        out[c] = (subs.get(c) or {}).get("accuracy")
    return out


def table_markdown(sweep: Sweep, results: dict[str, dict | None]) -> str:
    """Table 4 in the paper's layout; each cell "ours (paper)", – where missing."""
    f = lambda v: "–" if v is None else f"{v:.2f}"  # noqa: E731
    cols = ["avg", *sweep.columns]
    head = ["Method", "Avg.", *[c.replace("_", " ") for c in sweep.columns]]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in sweep.rows:
        ours = results.get(row.key) or {}
        cells = [f"{f(ours.get(c))} ({f(row.paper.get(c))})" for c in cols]
        lines.append("| " + " | ".join([row.name, *cells]) + " |")
    return (f"## Table 4: ablations on {sweep.benchmark} {', '.join(sweep.task_types)}\n\n"
            + "\n".join(lines) + "\n\nAccuracy % (mean over samples), ours (the paper's); Avg. is "
            "the sample-weighted average of the sub-types.\n")


def write_table(sweep: Sweep, out: Path) -> Path:
    results = {r.key: row_result(out / r.key / "eval" / "summary.json", sweep)
               for r in sweep.rows}
    out.mkdir(parents=True, exist_ok=True)
    (out / "table4.json").write_text(json.dumps(
        {"task_types": sweep.task_types, "rows": {r.key: {"name": r.name, "ours": results[r.key],
                                                          "paper": r.paper}
                                                  for r in sweep.rows}}, indent=2))
    path = out / "table4.md"
    path.write_text(table_markdown(sweep, results))
    return path


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m soft_spatial.ablation", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=Path("runs/table4"), help="sweep directory")
    p.add_argument("--config", type=Path, default=DEFAULT_CONFIG, help="rows and layout")
    p.add_argument("--rows", nargs="+", default=None, metavar="KEY",
                   help="only these rows (keys in the config)")
    p.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                   help="Hydra override for training and evaluation (e.g. model=tiny)")
    p.add_argument("--train-override", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--eval-override", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    p.add_argument("--table-only", action="store_true",
                   help="only (re)write the table from the rows' evaluations")
    return p


def preflight(runs: Sequence[RowRun]) -> dict[str, dict]:
    """Every row's training key, each compared with its ``train.done`` before any row runs: a row
    trained under other settings ends the command (`SystemExit`, naming each difference) with
    nothing run or written."""
    try:
        keys = {r.row.key: r.train_key() for r in runs}
        for r in runs:
            r.trained(keys[r.row.key])
    except OutputKeyMismatch as e:
        raise SystemExit(f"python -m soft_spatial.ablation: {e}") from None
    return keys


def main(argv: Sequence[str] | None = None) -> Path:
    with command("python -m soft_spatial.ablation",
                 "the running stage was ended; the same command resumes from the stages done"):
        return _main(argv)


def _main(argv: Sequence[str] | None) -> Path:
    args = _parser().parse_args(argv)
    if not args.dry_run:
        try:
            check_dir_path(args.out, "--out")
        except NotADirectoryOutput as e:
            raise SystemExit(f"python -m soft_spatial.ablation: {e}") from None
    sweep = load_sweep(args.config)
    if args.rows:
        unknown = sorted(set(args.rows) - {r.key for r in sweep.rows})
        if unknown:
            raise SystemExit(f"--rows: unknown {unknown}; the config has "
                             f"{[r.key for r in sweep.rows]}")
        sweep.rows = [r for r in sweep.rows if r.key in args.rows]
    if not args.table_only:
        runs = [RowRun(sweep, r, args.out, args.override, args.train_override,
                       args.eval_override) for r in sweep.rows]
        keys = {} if args.dry_run else preflight(runs)
        for i, r in enumerate(runs, 1):
            print(f"[{i}/{len(runs)}] {r.row.name} (experiment={r.row.experiment}, "
                  f"mode={r.mode})", flush=True)
            if args.dry_run:
                for cmd in (r.train_cmd(), r.merge_cmd(), r.eval_cmd()):
                    print("  " + " ".join(cmd))
                continue
            run_row(r, progress=lambda m: print(m, flush=True), key=keys[r.row.key])
        if args.dry_run:
            return args.out
    path = write_table(sweep, args.out)
    print(path.read_text() + f"\ntable: {path}")
    return path

