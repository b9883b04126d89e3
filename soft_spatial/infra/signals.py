"""SIGTERM and SIGHUP end a command as SIGINT (Ctrl-C) does: by an exception, so that every
``finally``, ``except BaseException`` and context manager on the way out runs (temporary files
removed, child processes ended, locks released), then a clean exit with status 128 + the signal.

SIGTERM is what Slurm sends at a job's time limit or on preemption, and what ``timeout``, ``kill``
and most supervisors send; SIGHUP is what a closing terminal (an ssh session that drops) sends.
Python's default for either is to die on the spot, running none of that.

    def main(argv=None):
        with command("python -m soft_spatial.x"):
            ...

Within :func:`command`'s block SIGTERM and SIGHUP raise :class:`Terminated` (a
``KeyboardInterrupt``, so code that cleans up after Ctrl-C cleans up after them too) in the main
thread; any of the three then ends the command with one line on stderr and exit status **130
(SIGINT), 143 (SIGTERM) or 129 (SIGHUP)**, the shell's convention, instead of a traceback. After
the first SIGTERM or SIGHUP further ones are ignored until the block ends, so a second one cannot
cut the cleanup short (SIGKILL still can). A SIGHUP that this process was started ignoring
(``nohup``) stays ignored. Only the handlers are Python's, so a child started in the block has the
signals' default actions.

A signal may arrive while a finalizer runs (``__del__``, a weakref callback, the garbage
collector; verl's import runs some), where Python swallows any exception ("Exception ignored
in ...") and goes on: the signal was marked received, so it and every later one were lost. Within
the block the swallowed :class:`Terminated` is not lost: the block's ``sys.unraisablehook`` takes
it (nothing printed), marks it not received and has a helper thread send the signal to the main
thread again once the hook has returned, where it raises as any other; should the block end
first, it raises as the block ends.

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

from soft_spatial.infra.gc_imports import for_command

__all__ = ["Terminated", "SIGNALS", "sigterm_raises", "reinstall", "exit_status", "command"]

#: the signals that raise :class:`Terminated` within a block
SIGNALS = (signal.SIGTERM, signal.SIGHUP)


class Terminated(KeyboardInterrupt):
    """SIGTERM (or SIGHUP, ``signum``) arrived; raised where SIGINT would raise ``KeyboardInterrupt``."""

    def __init__(self, signum: int = signal.SIGTERM) -> None:
        self.signum = signal.Signals(signum)
        super().__init__(self.signum.name)


_active: list[bool] = []  # one entry per open sigterm_raises block (main thread only)
_received: list[int] = [0]  # the signal that arrived in the outermost open block (0: none)
_pending: list[int] = [0]  # a signal swallowed by a finalizer, to be delivered again (0: none)
_redeliver_lock = threading.Lock()  # the hook holds it while it starts the thread that re-delivers


def _on_signal(signum, frame) -> None:
    if _received[0]:
        return  # the first one is being handled: let its cleanup finish
    _received[0], _pending[0] = signum, 0
    raise Terminated(signum)


def _redeliver() -> None:
    """The swallowed signal to the main thread again, once the hook that started this thread has
    returned (it holds the lock until then), unless the block took it meanwhile."""
    with _redeliver_lock:
        if _pending[0]:
            signal.pthread_kill(threading.main_thread().ident, _pending[0])


def _unraisable(hook):
    """A ``sys.unraisablehook`` that re-delivers a :class:`Terminated` a finalizer swallowed (module
    doc) and passes anything else to ``hook``."""

    def unraisable(unraisable) -> None:
        if not (isinstance(unraisable.exc_value, Terminated) and _active):
            hook(unraisable)
            return
        with _redeliver_lock:  # the thread sends nothing while this finalizer runs
            _received[0], _pending[0] = 0, unraisable.exc_value.signum
            threading.Thread(target=_redeliver, name="signal-redeliver", daemon=True).start()

    return unraisable


def _install() -> dict:
    """This module's handler for each of :data:`SIGNALS` (a SIGHUP ignored since the start, as
    under ``nohup``, stays ignored); returns the handlers it replaced."""
    previous = {}
    for signum in SIGNALS:
        current = signal.getsignal(signum)
        if signum == signal.SIGHUP and current == signal.SIG_IGN:
            continue
        previous[signum] = signal.signal(signum, _on_signal)
    return previous


def reinstall() -> None:
    """Install this module's handlers again (inside a :func:`sigterm_raises` block, in the main
    thread; otherwise nothing): for after a library call that replaced them."""
    if _active and threading.current_thread() is threading.main_thread():
        for signum in SIGNALS:
            if signal.getsignal(signum) != signal.SIG_IGN or signum == signal.SIGTERM:
                signal.signal(signum, _on_signal)


@contextlib.contextmanager
def sigterm_raises() -> Iterator[None]:
    """Within the block, SIGTERM and SIGHUP raise :class:`Terminated` in the main thread (elsewhere
    the block changes nothing: Python runs handlers in the main thread only). The previous
    handlers come back when the block ends."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    outermost = not _active
    previous = _install()
    hook = sys.unraisablehook
    _active.append(True)
    if outermost:
        _received[0] = _pending[0] = 0
        sys.unraisablehook = _unraisable(hook)
    swallowed = 0
    try:
        yield
    finally:
        try:
            if outermost:
                with _redeliver_lock:  # a re-delivery not yet sent: taken here instead
                    swallowed, _pending[0] = _pending[0], 0
        finally:
            _active.pop()
            if outermost:
                sys.unraisablehook = hook
            for signum, handler in previous.items():
                signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
    if swallowed:  # the body ended before the swallowed signal came back: it ends the block
        _received[0] = swallowed
        raise Terminated(swallowed)


def exit_status(interrupt: KeyboardInterrupt) -> int:
    """128 + the signal that raised ``interrupt``: 143 for SIGTERM's :class:`Terminated` (or for any
    ``KeyboardInterrupt`` once a SIGTERM arrived in the block: a library may raise its own while
    handling ours, as Ray's ``ray.get`` does), 129 for SIGHUP's, 130 otherwise."""
    if isinstance(interrupt, Terminated):
        return 128 + interrupt.signum
    if _active and _received[0]:
        return 128 + _received[0]
    return 128 + signal.SIGINT


@contextlib.contextmanager
def command(prog: str, note: str = "") -> Iterator[None]:
    """A command's body: SIGTERM and SIGHUP raise like SIGINT (:func:`sigterm_raises`), and any of
    them ends the command with ``PROG: interrupted by SIGTERM[: NOTE]`` on stderr and exit status
    128 + the signal (143, 129; 130 for SIGINT) once the cleanup on the way out has run."""
    # torch's and verl's imports without the collector's passes, the heap frozen at exit: seconds
    # of CPU per command (infra/gc_imports.py)
    for_command()
    status = 0
    try:
        with sigterm_raises():
            try:
                yield
            except KeyboardInterrupt as e:
                status = exit_status(e)  # in the block, which knows whether a signal came
                raise
    except KeyboardInterrupt as e:  # or a swallowed signal raised as the block ended
        status = status or exit_status(e)
        name = signal.Signals(status - 128).name
        print(f"{prog}: interrupted by {name}" + (f": {note}" if note else ""), file=sys.stderr,
              flush=True)
        raise SystemExit(status) from None
