"""SIGTERM ends a command as SIGINT (Ctrl-C) does: by an exception, so that every ``finally``,
``except BaseException`` and context manager on the way out runs (temporary files removed, child
processes ended, locks released), then a clean exit with status 128 + the signal.

SIGTERM is what Slurm sends at a job's time limit or on preemption, and what ``timeout``, ``kill``
and most supervisors send; Python's default for it is to die on the spot, running none of that.

    def main(argv=None):
        with command("python -m soft_spatial.x"):
            ...

Within :func:`command`'s block SIGTERM raises :class:`Terminated` (a ``KeyboardInterrupt``, so code
that cleans up after Ctrl-C cleans up after SIGTERM too) in the main thread; either signal then
ends the command with one line on stderr and exit status **130 (SIGINT) or 143 (SIGTERM)**, the
shell's convention, instead of a traceback. After the first SIGTERM further ones are ignored until
the block ends, so a second one cannot cut the cleanup short (SIGKILL still can). Only the
handler is Python's, so a child started in the block has SIGTERM's default action.

A library that installs its own SIGTERM handler inside the block (Ray's ``ray.init`` does, and its
core worker adds a C-level crash handler that dumps a stack and aborts) replaces this one:
call :func:`reinstall` once it returned (see ``soft_spatial.compat.ray.keep_sigterm_handler``).
"""
from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Iterator

__all__ = ["Terminated", "sigterm_raises", "reinstall", "exit_status", "command"]


class Terminated(KeyboardInterrupt):
    """SIGTERM arrived; raised where SIGINT would raise ``KeyboardInterrupt``."""

    signum = signal.SIGTERM

    def __init__(self) -> None:
        super().__init__("SIGTERM")


_active: list[bool] = []  # one entry per open sigterm_raises block (main thread only)
_received: list[bool] = [False]  # a SIGTERM arrived in the outermost open block


def _on_sigterm(signum, frame) -> None:
    if _received[0]:
        return  # the first one is being handled: let its cleanup finish
    _received[0] = True
    raise Terminated()


def reinstall() -> None:
    """Install this module's SIGTERM handler again (inside a :func:`sigterm_raises` block, in the
    main thread; otherwise nothing): for after a library call that replaced it."""
    if _active and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _on_sigterm)


@contextlib.contextmanager
def sigterm_raises() -> Iterator[None]:
    """Within the block, SIGTERM raises :class:`Terminated` in the main thread (elsewhere the
    block changes nothing: Python runs handlers in the main thread only). The previous handler
    comes back when the block ends."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    _active.append(True)
    if len(_active) == 1:
        _received[0] = False
    try:
        yield
    finally:
        _active.pop()
        signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)


def exit_status(interrupt: KeyboardInterrupt) -> int:
    """128 + the signal that raised ``interrupt``: 143 for :class:`Terminated` (or for any
    ``KeyboardInterrupt`` once a SIGTERM arrived in the block: a library may raise its own while
    handling ours, as Ray's ``ray.get`` does), 130 otherwise."""
    if isinstance(interrupt, Terminated) or (_active and _received[0]):
        return 128 + signal.SIGTERM
    return 128 + signal.SIGINT


@contextlib.contextmanager
def command(prog: str, note: str = "") -> Iterator[None]:
    """A command's body: SIGTERM raises like SIGINT (:func:`sigterm_raises`), and either ends the
    command with ``PROG: interrupted by SIGTERM[: NOTE]`` on stderr and exit status 143 (130 for
    SIGINT) once the cleanup on the way out has run."""
    with sigterm_raises():
        try:
            yield
        except KeyboardInterrupt as e:
            name = signal.Signals(exit_status(e) - 128).name
            print(f"{prog}: interrupted by {name}" + (f": {note}" if note else ""), file=sys.stderr,
                  flush=True)
            raise SystemExit(exit_status(e)) from None
