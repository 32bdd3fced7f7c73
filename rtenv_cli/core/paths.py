"""Where rtenv keeps its state: RTENV_HOME, else the user's cache dir (platformdirs)."""

from __future__ import annotations

import os
from pathlib import Path

HOME_ENV = "RTENV_HOME"


def rtenv_home() -> Path:
    """The root of the embedded default: the local store, digest cache and logs."""
    override = os.environ.get(HOME_ENV)
    if override:
        return Path(override).expanduser()
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("rtenv", appauthor=False))


def store_root() -> Path:
    """The embedded agent's store (packages, environments, index)."""
    return rtenv_home() / "store"


def digest_cache_path() -> Path:
    """The persistent (path, size, mtime_ns, inode, mode) -> digest cache (a file per root)."""
    return rtenv_home() / "digests"


def log_path() -> Path:
    return rtenv_home() / "rtenv.log"
