"""Built entries (`entries/<key>/`: meta.json, the completion marker, and tree/): built once per
key across threads and processes (single flight under the key's lock), in tmp/ first, published
by rename; an entry is indexed after its rename."""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path

from rtenv_cli.core.fsutil import fsync_dir
from rtenv_cli.core.store.files import (
    as_oserror,
    dir_size,
    out_of_space,
    owner_pid,
    sync_fs,
    write_synced,
)
from rtenv_cli.core.store.index import Entry, pid_alive
from rtenv_cli.core.store.layout import Layout
from rtenv_cli.core.store.locks import safe_key


class Entries:
    def __init__(self, layout: Layout) -> None:
        self.layout = layout

    def get_or_build(self, key: str, *, kind: str, uri: str, label: str,
                     build: Callable[[Path], None], hold: str | None = None) -> Entry:
        """Return the published entry `key`, building it once (single flight) if missing.

        `build(tree)` fills the empty directory `tree`; on any exception nothing is left behind.
        `hold`: a create's token; the entry is referenced for it in the transaction that finds
        it (under the key's lock when it is built), so no gc takes it before the create holds
        its environment (`Index.drop_create_holds` ends it).
        """
        entry = self._ready(key)
        if entry is not None and self._hold(key, hold):
            return entry
        layout = self.layout
        with layout.locks.lock(key):  # remove() cannot run meanwhile: it never waits for the lock
            entry = self._ready(key)
            if entry is not None:
                self._hold(key, hold)
                return entry
            work = layout.tmp_dir(key)
            try:
                tree = work / "tree"
                tree.mkdir()
                build(tree)
                now = time.time()
                entry = Entry(key=key, kind=kind, uri=uri, label=label,
                              path=f"entries/{safe_key(key)}", size_bytes=dir_size(tree),
                              created_at=now, last_used_at=now)
                sync_fs(work)  # the tree's files reach the disk before the marker names them
                write_synced(work / "meta.json", json.dumps(entry.to_dict()).encode())
                final = layout.entry_dir(key)
                if final.exists():  # a leftover without an index row: recover() re-indexes
                    layout.tombstone(final)
                os.rename(work, final)
                fsync_dir(final.parent)
            except BaseException as exc:
                shutil.rmtree(work, ignore_errors=True)
                if out_of_space(exc):
                    raise layout.disk_full(as_oserror(exc)) from exc
                raise
            layout.index.put(entry)
            self._hold(key, hold)
            return entry

    def _hold(self, key: str, token: str | None) -> bool:
        if token is None:
            return True
        index = self.layout.index
        with index.tx() as db:
            return index.hold_for_create(db, key, token)

    def _ready(self, key: str) -> Entry | None:
        index = self.layout.index
        entry = index.get(key)
        if entry is None:
            return None
        if not (self.layout.root / entry.path).exists():
            with index.tx() as db:
                index.delete(db, key)
            return None
        return entry

    def building(self) -> list[str]:
        """Names of builds in progress (temp dirs whose builder is alive): never gc'd."""
        out = []
        for work in (self.layout.root / "tmp").iterdir():
            pid = owner_pid(work.name)
            if pid is not None and work.is_dir() and pid_alive(pid, None):
                out.append(work.name.rsplit(".", 2)[0])
        return out

    def unpublish(self, key: str) -> bool:
        """Drop `key`'s index row and tombstone what it names, unless nothing has that row or
        something references it (the caller holds the key's lock)."""
        index = self.layout.index
        with index.tx() as db:
            row = db.execute("SELECT path FROM entries WHERE key=?", (key,)).fetchone()
            if row is None:
                return False
            if index.ref_count(db, key):
                return False
            index.delete(db, key)
            db.execute("DELETE FROM refs WHERE entry_key=?", (key,))  # ended ones
        self.layout.tombstone(self.layout.root / row["path"])
        return True
