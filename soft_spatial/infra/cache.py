"""The project's cache directory (built tokenizers, file fingerprints): ``$SOFT_SPATIAL_CACHE``,
else ``~/.cache/soft_spatial``."""
from __future__ import annotations

import os
from pathlib import Path

__all__ = ["cache_root"]


def cache_root() -> Path:
    """Directory for built artefacts: `$SOFT_SPATIAL_CACHE`, else `~/.cache/soft_spatial`."""
    root = os.environ.get("SOFT_SPATIAL_CACHE")
    return Path(root) if root else Path.home() / ".cache" / "soft_spatial"
