"""The project's cache directory (`soft_spatial.infra.cache`): ``$SOFT_SPATIAL_CACHE`` when set and
not empty, else ``~/.cache/soft_spatial``."""

from __future__ import annotations

from soft_spatial.infra.cache import cache_root


def test_the_cache_root_is_the_environments_else_the_users_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SOFT_SPATIAL_CACHE", str(tmp_path / "mine"))
    assert cache_root() == tmp_path / "mine"
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    default = tmp_path / "home" / ".cache" / "soft_spatial"
    monkeypatch.setenv("SOFT_SPATIAL_CACHE", "")  # set but empty: the default
    assert cache_root() == default
    monkeypatch.delenv("SOFT_SPATIAL_CACHE")
    assert cache_root() == default
