"""Ray's token authentication for a cluster a command starts: a fresh token of its own, readable by
its user only, never Ray's shared default.

Ray 2.60 turns token authentication on for a new local cluster and, unless told otherwise, keeps
the token in ``~/.ray/auth_token``, written with the umask's mode (0644 as a rule): where home
directories can be traversed, any local user could read it and run code as the cluster's user.
`token_auth` points the environment at a token of the cluster's own instead, created ``0600``
(``O_EXCL``: never a file someone else put there first). One function for both users of it: the
launcher (``runs/<job id>/ray/auth_token``, shared by every node of the job) and a local training
run (the token lives in the run's private Ray directory, ``infra.ray_session``, and goes with it).
"""
from __future__ import annotations

import os
import secrets
from collections.abc import MutableMapping
from pathlib import Path

__all__ = ["token_auth", "write_token"]


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
    token they named (``RAY_AUTH_TOKEN``, ``RAY_AUTH_TOKEN_PATH``). Returns whether ``env`` now
    names a token."""
    if env.get("RAY_AUTH_MODE", "token").lower() != "token":
        return False
    if env.get("RAY_AUTH_TOKEN") or env.get("RAY_AUTH_TOKEN_PATH"):
        env["RAY_AUTH_MODE"] = "token"
        return True
    if not create and not (token.is_file() and token.stat().st_size):
        return False
    if create and not dry_run and not token.is_file():
        write_token(token)
    env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=str(token))
    return True
