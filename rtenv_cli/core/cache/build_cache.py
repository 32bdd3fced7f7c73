"""The client's build cache, `<rtenv home>/build/last/`: the last zip built for each pushed
source (with its sidecar), kept so the next build of that source reuses its members
(packaging.zipreuse). Listed by `rtenv cache ls` as kind `build-cache` and removed by gc/purge,
least recently used first, like a store entry; it is never referenced, and removing one only
makes the next build of its source a fresh one."""

from __future__ import annotations

import contextlib
from pathlib import Path

from rtenv_cli.core.store.files import disk_bytes
from rtenv_cli.core.store.index import Entry

KIND = "build-cache"


def _dir() -> Path:
    from rtenv_cli.core.paths import rtenv_home

    return rtenv_home() / "build" / "last"


def _files(zip_path: Path) -> list[Path]:
    """The slot's files: the zip and everything named after it (sidecar, leftovers)."""
    stem = zip_path.name.split(".", 1)[0]
    return [p for p in zip_path.parent.iterdir() if p.name.split(".", 1)[0] == stem]


def entries() -> list[Entry]:
    """One entry per slot: its files' size on disk, last use = its newest file's mtime (a
    build of the source rewrites the zip and the sidecar)."""
    root = _dir()
    if not root.is_dir():
        return []
    out = []
    for zip_path in sorted(root.glob("*.zip")):
        size, newest, oldest = 0, 0.0, None
        for path in _files(zip_path):
            with contextlib.suppress(FileNotFoundError):
                st = path.stat()
                size += disk_bytes(st)
                newest = max(newest, st.st_mtime)
                oldest = st.st_mtime if oldest is None else min(oldest, st.st_mtime)
        stem = zip_path.name.split(".", 1)[0]
        out.append(Entry(key=f"{KIND}:{stem}", kind=KIND, uri=f"file://{zip_path}",
                         label="last zip built for a pushed source", path=str(zip_path),
                         size_bytes=size, created_at=oldest or newest, last_used_at=newest))
    return out


def remove(key: str) -> bool:
    """Delete a slot's files; a build reading it meanwhile keeps its open descriptor."""
    stem = key.removeprefix(f"{KIND}:")
    zip_path = _dir() / f"{stem}.zip"
    if not stem or "/" in stem or not zip_path.exists():
        return False
    for path in _files(zip_path):
        path.unlink(missing_ok=True)
    return True
