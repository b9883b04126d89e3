"""A Ray cluster's own token (soft_spatial/infra/ray_auth.py): fresh, 0600, never Ray's shared
default; the user's own choice wins. Used by the launcher (tests/launch/test_cluster.py) and by a
local training run (tests/e2e/test_train_signals.py reads it from the running GCS)."""
import os

import pytest

from soft_spatial.infra.ray_auth import token_auth, write_token


def test_a_cluster_started_gets_a_fresh_private_token(tmp_path):
    env, token = {}, tmp_path / "auth_token"
    assert token_auth(env, token, create=True)
    assert env == {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token)}
    assert oct(token.stat().st_mode & 0o777) == "0o600" and len(token.read_text()) == 64
    first = token.read_text()
    assert token_auth({}, token, create=True) and token.read_text() == first  # reused, not rewritten
    with pytest.raises(FileExistsError):
        write_token(token)  # never over a file someone put there
    other = tmp_path / "other"
    write_token(other)
    assert other.read_text() != first


def test_joining_uses_the_runs_token_or_leaves_rays_defaults(tmp_path):
    env = {}
    assert not token_auth(env, tmp_path / "auth_token", create=False) and env == {}
    (tmp_path / "auth_token").write_text("")  # empty: not a token
    assert not token_auth(env, tmp_path / "auth_token", create=False) and env == {}


@pytest.mark.parametrize("env", [{"RAY_AUTH_MODE": "disabled"}, {"RAY_AUTH_TOKEN_PATH": "/mine"},
                                 {"RAY_AUTH_TOKEN": "secret"}])
def test_the_users_own_choice_wins(tmp_path, env):
    given = dict(env)
    named = token_auth(env, tmp_path / "auth_token", create=True)
    assert not (tmp_path / "auth_token").exists()
    assert named == (given.get("RAY_AUTH_MODE") != "disabled")
    assert env == (given if not named else {**given, "RAY_AUTH_MODE": "token"})
    assert "RAY_AUTH_TOKEN_PATH" not in env or env["RAY_AUTH_TOKEN_PATH"] == given.get("RAY_AUTH_TOKEN_PATH")
    assert os.path.basename(str(tmp_path)) not in str(env)


@pytest.mark.parametrize("create", [True, False], ids=["starting", "joining"])
@pytest.mark.parametrize("plant", ["mode 0644", "another user's", "a link"])
def test_a_token_that_is_not_this_users_own_0600_file_is_refused_in_one_line(tmp_path, create, plant):
    """Issue 55 item 3: a planted 0644 token of known content became the cluster's key (the
    exclusive creation was skipped when the file existed) while the head listened on every
    interface. Refused now, naming the file and what is wrong, before ``env`` changes."""
    from soft_spatial.infra.ray_auth import UnsafeToken

    token = tmp_path / "auth_token"
    if plant == "a link":
        (tmp_path / "elsewhere").write_text("known")
        (tmp_path / "elsewhere").chmod(0o600)
        token.symlink_to(tmp_path / "elsewhere")
    else:
        token.write_text("known")
        token.chmod(0o644 if plant == "mode 0644" else 0o600)
        if plant == "another user's":
            if os.getuid() != 0:
                pytest.skip("giving a file to another user needs root")
            os.chown(token, 4321, 4321)
    env = {}
    with pytest.raises(UnsafeToken) as refused:
        token_auth(env, token, create=create)
    line = str(refused.value)
    assert "\n" not in line and str(token) in line and "remove it" in line
    assert {"mode 0644": "mode 644", "another user's": "belongs to uid 4321",
            "a link": "not a regular file"}[plant] in line
    assert env == {} and token.read_text() == "known"  # nothing changed, nothing written
