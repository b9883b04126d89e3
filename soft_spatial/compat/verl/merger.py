"""verl's FSDP model merger (verl 0.9.1, ``verl/model_merger/``) run so that no checkpoint shard can
run code: ``python -m soft_spatial.compat.verl.merger LOCAL_DIR TARGET_DIR``.

verl 0.9.1's ``FSDPModelMerger`` unpickles each ``model_world_size_W_rank_R.pt`` with
``torch.load(..., weights_only=False)`` (``fsdp_model_merger.py``: ``_load_rank_zero_state_dict``
L107-112, ``_load_and_merge_state_dicts`` L166-170, the latter in a thread pool): a shard from
elsewhere runs whatever code its pickle names. :func:`merge` runs verl's own merger CLI
(``verl.model_merger.__main__.main``, ``merge --backend fsdp``, its defaults: no
``trust_remote_code``) with the module attribute ``torch.load``, which those two methods call,
replaced for the duration by :func:`weights_only_load`: ``weights_only=True`` whatever the caller
asked. Tensors, and the DTensors of verl's FSDP2 shards with their placements, specs and device
mesh (allow-listed by torch itself once ``torch.distributed.tensor`` is imported), load as before;
a shard that names anything else is refused with :class:`UnsafeCheckpointError` naming the file,
before any of it runs. The rest of what the merger reads is data: ``fsdp_config.json`` and the
``huggingface/`` config, tokenizer and processor files (JSON and text, read by transformers
without remote code).

:func:`check_merger` lists what moved when verl changes (``tests/e2e/test_export_safety.py``).
"""
from __future__ import annotations

import contextlib
import functools
import inspect
import pickle
import re
import sys
from collections.abc import Iterator

__all__ = ["UnsafeCheckpointError", "REFUSED", "weights_only_load", "weights_only_loads",
           "merge", "check_merger", "main"]

REFUSED = 3  # the exit status of a refused checkpoint; the message is the last line on stderr
_UNSAFE = re.compile(r"Unsupported global: GLOBAL (\S+)")


class UnsafeCheckpointError(RuntimeError):
    """A checkpoint file whose unpickling would run code (it names a function or class that is
    not a tensor type): refused, nothing of it ran."""


def weights_only_load(original, f, *args, **kwargs):
    """``original`` (``torch.load``) with ``weights_only=True`` forced; a file that names code is
    refused with :class:`UnsafeCheckpointError` naming it."""
    kwargs["weights_only"] = True
    try:
        return original(f, *args, **kwargs)
    except pickle.UnpicklingError as e:
        found = _UNSAFE.search(str(e))
        if found is None:  # not a torch file at all, or torn: an ordinary failure
            raise
        raise UnsafeCheckpointError(
            f"{f}: refused: loading it would run code (its pickle names {found.group(1)}, not only "
            f"tensors); checkpoint shards are loaded weights-only: export only a checkpoint whose "
            f"shards hold tensors; nothing was exported") from None


@contextlib.contextmanager
def weights_only_loads() -> Iterator[None]:
    """Within the block, every ``torch.load(...)`` (the module attribute: in every thread, verl's
    merger included) loads weights-only (:func:`weights_only_load`)."""
    import torch
    import torch.distributed.tensor  # noqa: F401  (allow-lists DTensor and its placements)

    original = torch.load
    torch.load = functools.wraps(original)(functools.partial(weights_only_load, original))
    try:
        yield
    finally:
        torch.load = original


def merge(local_dir: str, target_dir: str) -> None:
    """verl's ``python -m verl.model_merger merge --backend fsdp --local_dir LOCAL_DIR
    --target_dir TARGET_DIR``, in this process, with :func:`weights_only_loads`."""
    from verl.model_merger import __main__ as verl_merger

    argv = sys.argv
    sys.argv = ["python -m verl.model_merger", "merge", "--backend", "fsdp",
                "--local_dir", str(local_dir), "--target_dir", str(target_dir)]
    try:
        with weights_only_loads():
            verl_merger.main()
    finally:
        sys.argv = argv


def check_merger() -> list:
    """What :func:`merge` relies on in verl's merger, checked against the installed verl (empty =
    OK): the CLI entry, and shard loads only through the ``torch.load`` module attribute."""
    from verl.model_merger import __main__ as verl_merger
    from verl.model_merger import base_model_merger as base
    from verl.model_merger import fsdp_model_merger as fsdp

    problems = []
    main_src = inspect.getsource(verl_merger.main)
    for needle in ("parse_args()", "generate_config_from_args(", "FSDPModelMerger(config)",
                   "merger.merge_and_save()"):
        if needle not in main_src:
            problems.append(f"verl.model_merger.__main__.main no longer calls {needle!r} (merge)")
    for name in ("_load_rank_zero_state_dict", "_load_and_merge_state_dicts"):
        method = getattr(fsdp.FSDPModelMerger, name, None)
        if method is None or "torch.load(" not in inspect.getsource(method):
            problems.append(f"FSDPModelMerger.{name} no longer loads shards with torch.load "
                            f"(weights_only_loads may not cover them)")
    for module in (fsdp, base):
        src = inspect.getsource(module)
        for loader in ("pickle", "torch.serialization", "import load", "safe_load_file", "mmap"):
            if loader in src:
                problems.append(f"{module.__name__} now uses {loader!r}: a load weights_only_loads "
                                f"may not cover")
    return problems


def main(argv: list | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        raise SystemExit("usage: python -m soft_spatial.compat.verl.merger LOCAL_DIR TARGET_DIR")
    try:
        merge(*args)
    except UnsafeCheckpointError as e:
        print(e, file=sys.stderr, flush=True)
        raise SystemExit(REFUSED) from None


if __name__ == "__main__":
    main()
