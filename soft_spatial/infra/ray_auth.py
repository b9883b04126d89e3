"""Ray's token authentication for a cluster a command starts: a fresh token of its own, readable by
its user only, never Ray's shared default.

Ray 2.60 turns token authentication on for a new local cluster and, unless told otherwise, keeps
the token in ``~/.ray/auth_token``, written with the umask's mode (0644 as a rule): where home
directories can be traversed, any local user could read it and run code as the cluster's user.
`token_auth` points the environment at a token of the cluster's own instead, created ``0600``
(``O_EXCL``: never a file someone else put there first). A token file already there is used only
when it is this user's own regular file that nobody else may read or write (mode 0600, or
stricter) and not empty; any other (a planted 0644 token of known content, another user's, a
link) is refused with :class:`UnsafeToken`, one line naming the file, what is wrong and the fix:
it would become the cluster's key. One function for both users of it: the launcher
(``runs/<job id>/ray/auth_token``, shared by every node of the job) and a local training run (the
token lives in the run's private Ray directory, ``infra.ray_session``, and goes with it).
"""
from __future__ import annotations

import os
import secrets
import stat
from collections.abc import MutableMapping
from pathlib import Path

__all__ = ["token_auth", "write_token", "check_token", "UnsafeToken"]


class UnsafeToken(PermissionError):
    """A token file that is not this user's own, readable by nobody else."""


def check_token(path: Path) -> None:
    """Refuse (:class:`UnsafeToken`, one line) a token file at ``path`` that is not a regular file
    of this user's with no permission for group or others and some content."""
    st = os.lstat(path)
    problem = ("is not a regular file (a link, a directory or a device)" if not stat.S_ISREG(st.st_mode)
               else f"belongs to uid {st.st_uid}, not {os.getuid()}" if st.st_uid != os.getuid()
               else f"may be read or written by others (mode {stat.S_IMODE(st.st_mode):o}, not 600)"
               if st.st_mode & 0o077 else "is empty" if not st.st_size else None)
    if problem:
        raise UnsafeToken(f"Ray token {path} {problem}: whoever could read or plant it could run "
                          f"code on the cluster; remove it and start again (a fresh token is written)")


def write_token(path: Path) -> None:
    """A fresh random token at ``path``, mode 0600 from its creation; an existing file is an error
    (``FileExistsError``): the caller decides whether to reuse it."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_hex(32))


def token_auth(env: MutableMapping[str, str], token: Path, create: bool, dry_run: bool = False) -> bool:
    """Point ``env`` (the environment Ray's processes and the driver get) at the token ``token``:
    ``RAY_AUTH_MODE=token`` and ``RAY_AUTH_TOKEN_PATH``. ``create``: write a fresh token there when
    there is none (a cluster being started); otherwise a token file present and not empty is used
    and none leaves Ray's defaults alone (joining a cluster started elsewhere). The user's own
    choice wins: ``RAY_AUTH_MODE`` other than ``token`` (``disabled``) is left as it is, and so is a
    token they named (``RAY_AUTH_TOKEN``, ``RAY_AUTH_TOKEN_PATH``). A token file at ``token`` that
    `check_token` refuses raises :class:`UnsafeToken`, ``env`` unchanged. Returns whether ``env``
    now names a token."""
    if env.get("RAY_AUTH_MODE", "token").lower() != "token":
        return False
    if env.get("RAY_AUTH_TOKEN") or env.get("RAY_AUTH_TOKEN_PATH"):
        env["RAY_AUTH_MODE"] = "token"
        return True
    present = os.path.lexists(token)
    if not create and not (present and os.lstat(token).st_size):  # none, or empty: not a token
        return False
    if present:
        check_token(token)  # refused before anything uses it
    if create and not dry_run and not present:
        write_token(token)
    env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=str(token))
    return True
