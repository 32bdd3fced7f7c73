"""Crash recovery, run when a store is opened: finish or discard whatever a crash left behind,
so that nothing published is lost and nothing half-built is ever seen.

* tombstones in trash/ are deleted; builds in tmp/ whose builder died are removed (everything in
  tmp/ and locks/ when this process has the store to itself);
* published entries and loose packages, manifests and blobs missing from the index (killed
  between the rename and the row) are re-indexed; rows whose files vanished are forgotten;
* an index SQLite cannot read is set aside as `index.sqlite.corrupt-<time>` and rebuilt from the
  directories; an entry or package whose files cannot be read goes to quarantine/.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

from rtenv_cli.core.store.files import disk_bytes, owner_pid, remove_path
from rtenv_cli.core.store.index import WAL_LIMIT, Entry, Index, pid_alive
from rtenv_cli.core.store.layout import Layout

log = logging.getLogger("rtenv.store")


def open_index(root: Path) -> Index:
    """The index under `root`; an unreadable one is set aside and a new, empty one started."""
    index = None
    try:
        index = Index(root / "index.sqlite")
        index.conn().execute("SELECT COUNT(*) FROM entries").fetchone()
    except sqlite3.DatabaseError as exc:
        if not _corrupt(exc):
            raise
        return _rebuild_index(root, exc, index)
    return index


def recover(layout: Layout, *, alone: bool = False) -> None:
    """Finish or discard whatever a crash left behind (see the module doc). `alone`: no
    other process has the store open, so nothing in tmp/ or locks/ is anyone's."""
    root = layout.root
    for grave in (root / "trash").iterdir():
        remove_path(grave)
    for work in (root / "tmp").iterdir():
        pid = owner_pid(work.name)
        if pid == os.getpid():
            continue  # our own build or upload, in another thread
        if alone or (pid is not None and not pid_alive(pid, None)):
            remove_path(work)
    if alone:
        for lock in (root / "locks").iterdir():
            lock.unlink(missing_ok=True)
    try:
        _reindex(layout)
    except sqlite3.DatabaseError as exc:  # readable at open, unreadable further in
        if not _corrupt(exc):
            raise
        layout.index = _rebuild_index(root, exc, layout.index)
        _reindex(layout)
    if alone or layout.index.wal_bytes() > WAL_LIMIT:
        with contextlib.suppress(sqlite3.OperationalError):  # busy: the agent's thread will
            layout.index.truncate_wal()  # a WAL grown before a restart is given back


def forget_dead_envs(index: Index) -> None:
    """Drop environments nobody holds whose entries are all gone (they are rebuilt, and
    listed again, by the next create)."""
    db = index.conn()
    keys = {r[0] for r in db.execute("SELECT key FROM entries")}
    dead = []
    for row in db.execute("SELECT key, spec FROM envs WHERE key NOT IN "
                          "(SELECT env_key FROM refs)"):
        try:
            entries = json.loads(row[1]).get("entries")
            gone = isinstance(entries, list) and entries and not keys.intersection(entries)
        except (ValueError, AttributeError, TypeError):
            gone = True  # a row nothing can read
        if gone:
            dead.append((row[0],))
    if dead:
        with index.tx() as tx:
            tx.executemany("DELETE FROM envs WHERE key=?", dead)


def _reindex(layout: Layout) -> None:
    root, index = layout.root, layout.index
    known = {e.key: e for e in index.all()}
    for published in (root / "entries").iterdir():
        meta = published / "meta.json"
        if not meta.exists():
            remove_path(published)
            continue
        try:
            data = json.loads(meta.read_bytes())
            data.pop("refs", None)
            entry = Entry(**data)
            if entry.path != f"entries/{published.name}":
                raise ValueError(f"names another directory ({entry.path})")
        except (ValueError, TypeError) as exc:  # torn by a power loss, or foreign
            layout.quarantine(published, f"meta.json unreadable ({exc})")
            continue
        if entry.key not in known:
            index.put(entry)
    for rel, kind in _loose_files(root):
        name = rel.rsplit("/", 1)[-1]
        if rel.startswith("manifests/"):
            name = name.removesuffix(".json")
        key = f"{kind}:{name}"
        path = root / rel
        if key not in known:  # published by rename, killed before the index row
            st = path.stat()
            if kind == "package" and st.st_size == 0:  # torn: not a package
                layout.quarantine(path, "empty file")
                continue
            known[key] = Entry(key, kind, "", "", rel, 0, 0.0, 0.0)
            index.put(Entry(key=key, kind=kind,
                            uri=f"gcs://{name}" if kind == "package" else f"sha256:{name}",
                            label=name if kind == "package" else name[:12], path=rel,
                            size_bytes=disk_bytes(st), created_at=st.st_mtime,
                            last_used_at=st.st_mtime))
    for entry in known.values():
        if not (root / entry.path).exists():
            with index.tx() as db:
                index.delete(db, entry.key)
    index.prune_refs()
    forget_dead_envs(index)


def _loose_files(root: Path) -> Iterator[tuple[str, str]]:
    for item in os.scandir(root / "manifests"):
        if item.is_file() and item.name.endswith(".json"):
            yield f"manifests/{item.name}", "package"
    for item in os.scandir(root / "packages"):
        if item.is_file() and not item.name.endswith(".remote"):  # a rendition, not a package
            yield f"packages/{item.name}", "package"
    for shard in os.scandir(root / "blobs"):
        if shard.is_dir():
            for item in os.scandir(shard.path):
                yield f"blobs/{shard.name}/{item.name}", "blob"


def _rebuild_index(root: Path, exc: Exception, old: Index | None = None) -> Index:
    """Set an unreadable index aside (`index.sqlite.corrupt-<time>`) and start an empty
    one; recover() then fills it from the directories."""
    if old is not None:
        old.close()
    stamp = time.strftime("%Y%m%dT%H%M%S")
    base = root / "index.sqlite"
    for suffix in ("", "-wal", "-shm"):
        with contextlib.suppress(FileNotFoundError):
            os.replace(f"{base}{suffix}", f"{base}.corrupt-{stamp}{suffix}")
    log.warning("rtenv store %s: index.sqlite unreadable (%s); set aside as "
                "index.sqlite.corrupt-%s, rebuilt from the directories", root, exc, stamp)
    return Index(base)


def _corrupt(exc: sqlite3.DatabaseError) -> bool:
    """SQLite found the file damaged or not a database (busy, locked, full are other errors:
    its subclasses)."""
    return type(exc) is sqlite3.DatabaseError
