"""The store's SQLite index (WAL): entries and references.

Entries are published artefacts (packages, blobs, unpacked packages, venvs); a reference ties an
entry to a holder (a run's pid, a job id) through the environment that needs it. The index is
only ever a mirror of the directories: on open the store reconciles the two.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

try:
    import fcntl
except ImportError:  # not POSIX
    fcntl = None  # type: ignore[assignment]

SCHEMA = """
CREATE TABLE IF NOT EXISTS entries (
    key TEXT PRIMARY KEY, kind TEXT NOT NULL, uri TEXT NOT NULL, label TEXT NOT NULL,
    path TEXT NOT NULL, size_bytes INTEGER NOT NULL, created_at REAL NOT NULL,
    last_used_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS refs (
    env_key TEXT NOT NULL, entry_key TEXT NOT NULL, holder TEXT NOT NULL, pid INTEGER,
    pid_start TEXT, expires_at REAL, created_at REAL NOT NULL,
    PRIMARY KEY (env_key, entry_key, holder));
CREATE INDEX IF NOT EXISTS refs_entry ON refs(entry_key);
CREATE TABLE IF NOT EXISTS envs (
    key TEXT PRIMARY KEY, spec TEXT NOT NULL, created_at REAL NOT NULL, last_used_at REAL NOT NULL);
"""


@dataclass(frozen=True)
class Entry:
    key: str
    kind: str  # package | blob | working_dir | py_modules | pip | uv
    uri: str
    label: str
    path: str  # relative to the store root
    size_bytes: int
    created_at: float
    last_used_at: float
    refs: int = 0

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def pid_start_time(pid: int) -> str | None:
    """The kernel's start time of `pid` (so a recycled pid is not mistaken for the holder)."""
    try:  # raw os calls: this runs on every reference a holder takes (the cache-hit path)
        fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY)
        try:
            stat = os.read(fd, 4096).decode("ascii", "replace")
        finally:
            os.close(fd)
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def pid_alive(pid: int, start: str | None) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    if start is None:
        return True
    current = pid_start_time(pid)
    return current is None or current == start


@contextmanager
def _flocked(fd: int) -> Iterator[None]:
    if fcntl is None:  # not POSIX: SQLite's own locking alone
        yield
        return
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)


class Index:
    """One connection per thread; writes in short BEGIN IMMEDIATE transactions."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._local = threading.local()
        # one writer at a time in this process: SQLite's own busy handler backs off by sleeping
        # (1, 2, 5, 10 ms...), which would turn contention between threads into latency spikes
        self._write_lock = threading.Lock()
        # ... and one writer at a time across processes (`rtenv agent --workers N`, the CLI): a
        # blocking flock wakes the next writer when the lock is released, where SQLite's busy
        # handler would poll with sleeps of 1-100 ms (and filelock, used for the per-key build
        # locks, polls too: hence flock(2) itself here)
        self._lock_fd = os.open(f"{path}.wlock", os.O_RDWR | os.O_CREAT, 0o644)
        self._autocheckpoint = True
        self.conn().executescript(SCHEMA)

    def conn(self) -> sqlite3.Connection:
        db = getattr(self._local, "db", None)
        if db is None:
            db = sqlite3.connect(self.path, timeout=30, isolation_level=None,
                                 check_same_thread=False)
            db.execute("PRAGMA journal_mode=WAL")
            # NORMAL is durable against process crashes in WAL mode; only power loss may drop
            # the last transaction, which recovery re-derives from the published directories
            db.execute("PRAGMA synchronous=NORMAL")
            if not self._autocheckpoint:
                db.execute("PRAGMA wal_autocheckpoint=0")
            db.row_factory = sqlite3.Row
            self._local.db = db
        return db

    def checkpoint_in_background(self, interval_s: float = 2.0) -> None:
        """For a long-running server: fold the WAL back from a daemon thread, off the request
        path (an automatic checkpoint inside a commit fsyncs and shows up as p99 latency)."""
        self._autocheckpoint = False
        self.conn().execute("PRAGMA wal_autocheckpoint=0")

        def loop() -> None:
            import contextlib
            import time as _time

            db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
            while True:
                _time.sleep(interval_s)
                with contextlib.suppress(sqlite3.Error):
                    db.execute("PRAGMA wal_checkpoint(PASSIVE)")

        threading.Thread(target=loop, name="rtenv-wal-checkpoint", daemon=True).start()

    @contextmanager
    def tx(self) -> Iterator[sqlite3.Connection]:
        db = self.conn()
        with self._write_lock, _flocked(self._lock_fd):
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")

    # -- entries ----------------------------------------------------------------------------------
    def get(self, key: str) -> Entry | None:
        row = self.conn().execute("SELECT * FROM entries WHERE key=?", (key,)).fetchone()
        return Entry(**dict(row)) if row else None

    def put(self, entry: Entry) -> None:
        with self.tx() as db:
            db.execute("INSERT OR REPLACE INTO entries VALUES (?,?,?,?,?,?,?,?)",
                       (entry.key, entry.kind, entry.uri, entry.label, entry.path,
                        entry.size_bytes, entry.created_at, entry.last_used_at))

    def touch(self, key: str) -> None:
        with self.tx() as db:
            db.execute("UPDATE entries SET last_used_at=? WHERE key=?", (time.time(), key))

    def delete(self, db: sqlite3.Connection, key: str) -> None:
        db.execute("DELETE FROM entries WHERE key=?", (key,))

    def all(self) -> list[Entry]:
        rows = self.conn().execute(
            "SELECT e.*, (SELECT COUNT(DISTINCT r.env_key || '|' || r.holder) FROM refs r "
            "WHERE r.entry_key=e.key) AS refs FROM entries e ORDER BY created_at").fetchall()
        return [Entry(**dict(r)) for r in rows]

    # -- references -------------------------------------------------------------------------------
    def ref_count(self, db: sqlite3.Connection, key: str) -> int:
        return int(db.execute("SELECT COUNT(*) FROM refs WHERE entry_key=?", (key,))
                   .fetchone()[0])

    def prune_refs(self) -> int:
        """Drop references whose holder process died or whose lease expired."""
        now = time.time()
        rows = self.conn().execute(
            "SELECT DISTINCT env_key, holder, pid, pid_start, expires_at FROM refs").fetchall()
        dead = [(r["env_key"], r["holder"]) for r in rows
                if (r["expires_at"] is not None and r["expires_at"] < now)
                or (r["pid"] is not None and not pid_alive(r["pid"], r["pid_start"]))]
        if dead:
            with self.tx() as db:
                db.executemany("DELETE FROM refs WHERE env_key=? AND holder=?", dead)
        return len(dead)
