"""``python -m soft_spatial.export CHECKPOINT_DIR OUT_DIR``: a training checkpoint as one directory.

OUT_DIR gets the Hugging Face weights (verl's model merger, ``merge --backend fsdp``, run on the
actor's FSDP shards by :mod:`soft_spatial.compat.verl.merger`), the AdaptSoft controller (``adaptsoft.pt``,
when the run trained one) and the soft settings of the run (``soft_settings.yaml``: the
``SoftSettings.to_dict()`` training wrote beside its checkpoints, copied as it is; an older run's
``soft_thinking.yaml`` is refused, saying to rename it). Then

    python -m soft_spatial.eval model.path=OUT_DIR

evaluates in the run's mode with its controller and settings, no further arguments needed;
arguments given on the command line still win (``soft_spatial.eval.__main__.apply_exported``).

CHECKPOINT_DIR is the trainer's ``default_local_dir`` (its latest step is taken), one
``global_step_N`` directory, or that step's ``actor`` directory. The export is written to
``OUT_DIR.partial`` and renamed when complete, so an interrupted export never looks finished; a
failed one removes ``OUT_DIR.partial``. An OUT_DIR that is a symbolic link is written through (the
export replaces the directory it points to, built beside it). A checkpoint of an ``adaptsoft``
run without its controller is refused before anything is written.

The settings exported are those that trained the checkpoint: ``global_step_N/soft_settings.yaml``,
written with each checkpoint, or, for a run from before checkpoints carried their own, the run's
``soft_settings.yaml`` (training refuses to change a run's soft settings, so it is theirs).

One export per OUT_DIR: a lock beside it (``.OUT_DIR.lock``, removed when the export ends)
refuses a second export to the same output at once, naming the first. SIGTERM (Slurm, ``timeout``,
``kill``) and SIGHUP (the terminal closing) end an export as Ctrl-C does: the merger, tethered to
the export (``infra/tether.py``), ends with everything it started, ``OUT_DIR.partial`` is removed,
and the command exits 128 + the signal (143, 129; 130 for SIGINT).

What is trusted: nothing in the checkpoint runs code. The FSDP shards are unpickled
weights-only (``torch.load(weights_only=True)``: tensors and verl's DTensors with their
placements and device mesh; :mod:`soft_spatial.compat.verl.merger` runs verl's merger so), and a
shard that would run code is refused, naming the file, before any of it runs. The
``huggingface/`` config and tokenizer are read by transformers without remote code; the
controller (``adaptsoft.pt``) is copied byte for byte (evaluation loads it weights-only) and the
settings file is YAML read safely. The optimizer and extra-state shards are not read.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path
from collections.abc import Sequence

from soft_spatial.compat.verl.merger import REFUSED, UnsafeCheckpointError
from soft_spatial.infra import tether
from soft_spatial.infra.dirlock import OutputLock
from soft_spatial.infra.run_dir import TRACKER, latest_step
from soft_spatial.infra.signals import command
from soft_spatial.softthink.settings import CONTROLLER_FILE, SETTINGS_FILE, SoftSettings
from soft_spatial.softthink.settings import settings_file as run_settings_file

LATEST = TRACKER  # verl's pointer to the last saved step


def actor_dir(checkpoint: str | Path) -> Path:
    """The ``global_step_N/actor`` directory that ``checkpoint`` names (see the module docstring);
    an empty or garbled tracker is an error naming it and the run."""
    path = Path(checkpoint)
    step = latest_step(path)
    if step is not None:
        path = path / f"global_step_{step}"
    if (path / "actor").is_dir():
        path = path / "actor"
    if not path.is_dir() or not any(path.glob("model_world_size_*_rank_*.pt")):
        raise FileNotFoundError(f"{checkpoint}: no FSDP actor checkpoint (model_world_size_*_rank_*.pt) "
                                f"found at {path}")
    return path


def settings_file(actor: Path) -> Path | None:
    """The run's settings file (``soft_settings.yaml``) in the trainer's directory above
    ``global_step_N``."""
    for directory in (actor, actor.parent, actor.parent.parent):
        found = run_settings_file(directory)
        if found is not None:
            return found
    return None


def check_controller(actor: Path, settings: Path | None) -> None:
    """Refuse the checkpoint of an ``adaptsoft`` run (per its ``settings``) whose actor directory
    lacks the trained controller: the export would evaluate in a mode it cannot run."""
    if settings is None:
        return
    mode = SoftSettings.load(settings).soft_thinking.mode  # an invalid file: refused here
    if mode == "adaptsoft" and not (actor / CONTROLLER_FILE).is_file():
        raise FileNotFoundError(
            f"{actor / CONTROLLER_FILE} is missing: {settings} says soft_thinking.mode=adaptsoft, "
            f"so the checkpoint must hold the trained controller; nothing was exported")


def checkpoint_dirs(actor: Path) -> list[Path]:
    """What an export reads and must never write or delete: the actor directory, its
    ``global_step_N`` and the run directory above it (``trainer.default_local_dir``), resolved."""
    actor = actor.resolve()
    step = actor.parent if actor.name == "actor" else actor
    run = step.parent if step.name.startswith("global_step_") else step
    return list(dict.fromkeys([actor, step, run]))


def check_output(out: Path, actor: Path) -> None:
    """Refuse an output directory that is, contains or lies inside the checkpoint or its run:
    ``--overwrite`` (or the ``OUT.partial`` beside it) would delete what the export reads, the
    whole training run with it."""
    target = out.resolve()
    for protected in checkpoint_dirs(actor):
        for path in (target, target.with_name(target.name + ".partial")):
            if path == protected or path.is_relative_to(protected) or protected.is_relative_to(path):
                raise ValueError(f"output {out} would overlap the checkpoint's {protected} (it is, "
                                 f"contains or lies inside it; replacing it would delete the run): "
                                 f"export to a directory outside it; nothing was exported")


def merge_command(actor: Path, target: Path) -> list[str]:
    """verl's merger for an FSDP actor checkpoint, loading its shards weights-only
    (:mod:`soft_spatial.compat.verl.merger`)."""
    return [sys.executable, "-m", "soft_spatial.compat.verl.merger", str(actor), str(target)]


def run_merger(actor: Path, target: Path) -> None:
    """Merge ``actor`` into ``target`` in a child process tethered to this one: if this process is
    interrupted (SIGINT, or SIGTERM and SIGHUP under :func:`soft_spatial.infra.signals.command`),
    the merger and everything it started are ended before the interruption goes on, so nothing
    writes ``target`` after this returns or raises. A refused checkpoint raises
    :class:`UnsafeCheckpointError`."""
    env = dict(os.environ)
    if not _has_cuda():
        env.setdefault("VERL_PLATFORM", "cpu")  # verl's merger needs a platform; ours on a CPU
    proc = tether.run(merge_command(actor, target), env=env, stdout=subprocess.PIPE,
                      stderr=subprocess.STDOUT, text=True)
    output = proc.stdout
    if proc.returncode == REFUSED:
        lines = output.strip().splitlines()
        raise UnsafeCheckpointError(lines[-1] if lines else f"{actor}: refused by the merger")
    if proc.returncode != 0:
        raise RuntimeError(f"verl's model merger failed on {actor} (exit {proc.returncode}):\n"
                           f"{output[-3000:]}")


def _has_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def check_empty(out: Path, overwrite: bool) -> None:
    if out.exists() and any(out.iterdir()) and not overwrite:
        raise FileExistsError(f"{out} exists and is not empty (pass --overwrite to replace it)")


def export(checkpoint: str | Path, out: str | Path, *, overwrite: bool = False) -> Path:
    """Merge ``checkpoint`` into ``out`` with the controller and settings beside the weights. An
    ``out`` that is a symbolic link (weights kept on another file system) is written through: the
    export is built beside the directory it points to and replaces that directory; the link stays."""
    actor = actor_dir(checkpoint)
    out = Path(out)
    target = out.resolve() if out.is_symlink() else out  # where the files go
    check_output(out, actor)
    check_empty(target, overwrite)
    source = settings_file(actor)
    check_controller(actor, source)  # every refusal above writes nothing
    with OutputLock(target, "export output"):  # one export per OUT: they would share OUT.partial
        check_empty(target, overwrite)  # again: another export may have finished meanwhile
        partial = target.with_name(target.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)  # a killed export's
        try:
            run_merger(actor, partial)
            if (actor / CONTROLLER_FILE).is_file():
                shutil.copy2(actor / CONTROLLER_FILE, partial / CONTROLLER_FILE)
            if source is not None:
                shutil.copy2(source, partial / SETTINGS_FILE)
            replace_dir(partial, target)
        except BaseException:  # a failed (or interrupted) export leaves no OUT.partial behind
            shutil.rmtree(partial, ignore_errors=True)
            raise
    return out


def replace_dir(new: Path, old: Path) -> None:
    """Put the directory ``new`` in the place of ``old`` (a directory, possibly empty, or nothing):
    ``old`` is moved aside first and removed once ``new`` is in place, so that a failure on the
    way leaves one of the two there."""
    if not old.exists():
        os.replace(new, old)
        return
    aside = old.with_name(f".{old.name}.replaced-{os.getpid()}")
    os.replace(old, aside)
    try:
        os.replace(new, old)
    except BaseException:
        os.replace(aside, old)
        raise
    shutil.rmtree(aside)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m soft_spatial.export", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkpoint", type=Path, help="trainer.default_local_dir, a global_step_N or its actor dir")
    parser.add_argument("out", type=Path, help="the directory to write (Hugging Face weights + controller + settings)")
    parser.add_argument("--overwrite", action="store_true", help="replace a non-empty OUT")
    args = parser.parse_args(argv)
    prog = "python -m soft_spatial.export"
    with command(prog, f"the merger was ended and {args.out}.partial removed"):
        try:
            out = export(args.checkpoint, args.out, overwrite=args.overwrite)
        except (FileNotFoundError, FileExistsError, ValueError, RuntimeError) as e:  # refused or failed: said plainly
            raise SystemExit(f"{prog}: {e}") from None
    files = sorted(p.name for p in out.iterdir())
    print(f"exported {actor_dir(args.checkpoint)} to {out}: {', '.join(files)}")
    print(f"evaluate with: python -m soft_spatial.eval model.path={out}")


if __name__ == "__main__":
    main()
