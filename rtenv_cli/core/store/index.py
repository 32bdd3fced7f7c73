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
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

from rtenv_cli.core.fsutil import HAVE_FLOCK, flock, unflock

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

WAL_LIMIT = 64 << 20  # the WAL is truncated once it has grown past this
PIN_ENV, PIN_HOLDER = "pin", "upload"  # the reference row of a pin
CREATING_ENV = "creating"  # rows holding what a create in progress built or found

# references whose lease (or pin) ended, or whose lease is not a number (older code's rows)
_ANY_LEASE_ENDED = ("SELECT 1 FROM refs WHERE expires_at IS NOT NULL AND (typeof(expires_at) "
                    "NOT IN ('integer', 'real') OR expires_at < ?) LIMIT 1")
_DROP_LEASES_ENDED = ("DELETE FROM refs WHERE expires_at IS NOT NULL AND (typeof(expires_at) "
                      "NOT IN ('integer', 'real') OR expires_at < ?)")


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
    refs: int = 0  # live holders (an environment's, or a create's in progress)
    pinned: bool = False  # a fresh upload within its pin: not collectable, yet held by no one
    pinned_until: float | None = None  # when the pin ends (with `pinned`)

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


PID_MAX = 1 << 22  # the kernel's largest pid_max


def valid_pid(pid: object) -> bool:
    """A pid a reference may name: an int of a real process id (0 and -1 are process groups
    to kill(2), so a reference naming them would never be pruned)."""
    return type(pid) is int and 0 < pid <= PID_MAX


def pid_alive(pid: int, start: str | None) -> bool:
    if not valid_pid(pid):  # a row stored by older code, or another tool: no such holder
        return False
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


def _parts(keys: list[str]) -> Iterator[tuple[list[str], str]]:
    """`keys` in parts SQLite takes as host parameters (its limit), each with its `?,?,...`."""
    for i in range(0, len(keys), 500):
        part = keys[i:i + 500]
        yield part, ",".join("?" * len(part))


class WriterBusy(Exception):
    """Another writer holds the index's write lock (`Index.tx(wait=False)`)."""


@contextmanager
def _flocked(fd: int, *, wait: bool = True) -> Iterator[None]:
    """Hold the write lock on `fd` (the index's, open for its life: let go, not closed);
    WriterBusy at once when another holds it and `wait` is off."""
    if not HAVE_FLOCK:  # not POSIX: SQLite's own locking alone
        yield
        return
    if not flock(fd, None if wait else 0):
        raise WriterBusy
    try:
        yield
    finally:
        unflock(fd)


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
        # handler would poll with sleeps of 1-100 ms (and filelock polls too: hence flock(2)
        # itself here, fsutil.flock with no time limit)
        self._lock_fd = os.open(f"{path}.wlock", os.O_RDWR | os.O_CREAT, 0o600)
        self._autocheckpoint = True
        # the upkeep thread (checkpoint_in_background), stopped and joined by close(): left
        # running, its connection's checkpoint kept the next open of the store from truncating
        # the WAL, and its next round met the closed lock descriptor
        self._stop = threading.Event()
        self._upkeep: threading.Thread | None = None
        if not path.exists():  # SQLite gives the -wal and -shm files the database's mode
            os.close(os.open(path, os.O_RDWR | os.O_CREAT, 0o600))
        try:
            self.conn().executescript(SCHEMA)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Stop the upkeep thread; close this thread's connection and the write lock's
        descriptor."""
        self._stop.set()
        upkeep = self._upkeep
        if upkeep is not None and upkeep is not threading.current_thread():
            upkeep.join(timeout=60)  # a round waits at most for one writer's transaction
        db = getattr(self._local, "db", None)
        if db is not None:
            db.close()
            self._local.db = None
        if self._lock_fd >= 0:
            os.close(self._lock_fd)
            self._lock_fd = -1

    def conn(self) -> sqlite3.Connection:
        db = getattr(self._local, "db", None)
        if db is None:
            db = sqlite3.connect(self.path, timeout=30, isolation_level=None,
                                 check_same_thread=False)
            db.execute("PRAGMA journal_mode=WAL")
            # NORMAL is durable against process crashes in WAL mode; only power loss may drop
            # the last transaction, which recovery re-derives from the published directories
            db.execute("PRAGMA synchronous=NORMAL")
            # a WAL reset back to its start also gives the file back beyond this size
            db.execute(f"PRAGMA journal_size_limit={WAL_LIMIT}")
            if not self._autocheckpoint:
                db.execute("PRAGMA wal_autocheckpoint=0")
            db.row_factory = sqlite3.Row
            self._local.db = db
        return db

    def wal_bytes(self) -> int:
        try:
            return os.stat(f"{self.path}-wal").st_size
        except OSError:
            return 0

    def truncate_wal(self) -> None:
        """Fold the whole WAL into the database and cut the file to zero bytes. Writers of
        every process wait meanwhile (the write locks are held): under steady load a reader
        or writer is always there, and a checkpoint that only waits for a gap never gets one."""
        with self._write_lock, _flocked(self._lock_fd):
            self.conn().execute("PRAGMA wal_checkpoint(TRUNCATE)")

    def maintain(self, *, wal_limit: int = WAL_LIMIT) -> None:
        """One round of upkeep: a PASSIVE checkpoint (never waits), the WAL truncated when it
        has grown past `wal_limit` anyway."""
        self.conn().execute("PRAGMA wal_checkpoint(PASSIVE)")
        if self.wal_bytes() > wal_limit:
            self.truncate_wal()

    def checkpoint_in_background(self, interval_s: float = 2.0, *,
                                 prune_every_s: float = 60.0) -> None:
        """For a long-running server: fold the WAL back from a daemon thread, off the request
        path (an automatic checkpoint inside a commit fsyncs and shows up as p99 latency), and
        drop ended references now and then (every hit writes one; leases end unattended)."""
        self._autocheckpoint = False
        self.conn().execute("PRAGMA wal_autocheckpoint=0")

        def loop() -> None:
            import contextlib

            next_prune = time.monotonic() + prune_every_s
            try:
                while not self._stop.wait(interval_s):
                    with contextlib.suppress(sqlite3.Error, OSError):
                        self.maintain()
                        if time.monotonic() >= next_prune:
                            next_prune = time.monotonic() + prune_every_s
                            self.prune_refs()
            finally:
                db = getattr(self._local, "db", None)
                if db is not None:
                    db.close()

        if self._upkeep is None:
            self._upkeep = threading.Thread(target=loop, name="rtenv-wal-checkpoint",
                                            daemon=True)
            self._upkeep.start()

    @contextmanager
    def tx(self, *, wait: bool = True) -> Iterator[sqlite3.Connection]:
        """A write transaction. With `wait=False`, WriterBusy at once when another writer (a
        thread of this process, or another process) holds the write lock: an event loop never
        sleeps on it (a writer in a process the scheduler has just preempted would hold the
        whole loop for a time slice)."""
        db = self.conn()
        if not self._write_lock.acquire(blocking=wait):
            raise WriterBusy
        try:
            with _flocked(self._lock_fd, wait=wait):
                db.execute("BEGIN IMMEDIATE")
                try:
                    yield db
                except BaseException:
                    db.execute("ROLLBACK")
                    raise
                db.execute("COMMIT")
        finally:
            self._write_lock.release()

    # -- entries ----------------------------------------------------------------------------------
    def get(self, key: str) -> Entry | None:
        row = self.conn().execute("SELECT * FROM entries WHERE key=?", (key,)).fetchone()
        return Entry(**dict(row)) if row else None

    def put(self, entry: Entry, *, pin_s: float | None = None) -> None:
        """Write `entry`'s row; with `pin_s`, pinned that long in the same transaction (an
        upload is never unreferenced and collectable in between)."""
        with self.tx() as db:
            db.execute("INSERT OR REPLACE INTO entries VALUES (?,?,?,?,?,?,?,?)",
                       (entry.key, entry.kind, entry.uri, entry.label, entry.path,
                        entry.size_bytes, entry.created_at, entry.last_used_at))
            if pin_s:
                self.pin(db, [entry.key], pin_s)

    def hold_for_create(self, db: sqlite3.Connection, key: str, token: str) -> bool:
        """Reference `key`, if it exists, for a create in progress (`token`) until that create
        holds its environment's references, or its process dies."""
        if db.execute("SELECT 1 FROM entries WHERE key=?", (key,)).fetchone() is None:
            return False
        pid = os.getpid()
        db.execute("INSERT OR REPLACE INTO refs VALUES (?,?,?,?,?,NULL,?)",
                   (CREATING_ENV, key, token, pid, pid_start_time(pid), time.time()))
        return True

    def drop_create_holds(self, db: sqlite3.Connection, token: str) -> None:
        db.execute("DELETE FROM refs WHERE env_key=? AND holder=?", (CREATING_ENV, token))

    def set_size(self, key: str, size_bytes: int) -> None:
        with self.tx() as db:
            db.execute("UPDATE entries SET size_bytes=? WHERE key=?", (size_bytes, key))

    def touch(self, key: str) -> None:
        with self.tx() as db:
            db.execute("UPDATE entries SET last_used_at=? WHERE key=?", (time.time(), key))

    def delete(self, db: sqlite3.Connection, key: str) -> None:
        db.execute("DELETE FROM entries WHERE key=?", (key,))

    def all(self) -> list[Entry]:
        now = time.time()
        rows = self.conn().execute(
            "SELECT e.*, (SELECT COUNT(DISTINCT r.env_key || '|' || r.holder) FROM refs r "
            "WHERE r.entry_key=e.key AND r.env_key != ? "
            "AND (r.expires_at IS NULL OR r.expires_at >= ?)) AS refs, "
            "(SELECT MAX(r.expires_at) FROM refs r WHERE r.entry_key=e.key AND r.env_key = ? "
            "AND r.expires_at >= ?) AS pinned_until FROM entries e ORDER BY created_at",
            (PIN_ENV, now, PIN_ENV, now)).fetchall()
        return [Entry(**{**dict(r), "pinned": r["pinned_until"] is not None}) for r in rows]

    # -- references -------------------------------------------------------------------------------
    def ref_count(self, db: sqlite3.Connection, key: str) -> int:
        """Live references to `key`: expired leases and pins no longer count."""
        return int(db.execute("SELECT COUNT(*) FROM refs WHERE entry_key=? AND "
                              "(expires_at IS NULL OR expires_at >= ?)", (key, time.time()))
                   .fetchone()[0])

    def present(self, db: sqlite3.Connection, keys: Iterable[str]) -> set[str]:
        """Which of `keys` have an entry (in `db`'s transaction)."""
        found = set[str]()
        for part, marks in _parts(sorted(set(keys))):
            found.update(r[0] for r in db.execute(
                f"SELECT key FROM entries WHERE key IN ({marks})", part))  # noqa: S608 - placeholders only
        return found

    def mark_used(self, db: sqlite3.Connection, keys: list[str], now: float) -> None:
        """`touch` for many entries at once, at `now`, in `db`'s transaction."""
        for part, marks in _parts(keys):
            db.execute(f"UPDATE entries SET last_used_at=? WHERE key IN ({marks})",  # noqa: S608 - placeholders only
                       (now, *part))

    def pin(self, db: sqlite3.Connection, keys: list[str], seconds: float) -> list[str]:
        """Keep the entries of `keys` that exist from gc for `seconds` (a lease held by no one,
        like Ray's temporary URI reference); returns the keys that exist. A pin is a reference
        row, so the transaction that checks for it before deleting an entry sees it."""
        if not keys:
            return []
        now = time.time()
        found = self.present(db, keys)
        present = list(dict.fromkeys(key for key in keys if key in found))
        db.executemany("INSERT OR REPLACE INTO refs VALUES (?,?,?,NULL,NULL,?,?)",
                       [(PIN_ENV, key, PIN_HOLDER, now + seconds, now) for key in present])
        return present

    def prune_refs(self) -> int:
        """Drop references whose holder process died or whose lease (or pin) expired; rows
        whose pid or lease is not a number (stored by older code) go too. Returns the rows
        dropped. Each holder process is looked at once, however many references it holds (the
        agent runs this beside its event loop: a walk over every row in Python would hold the
        GIL for as long). The deletes name the dead process (pid and start time) and the ended
        lease themselves, inside the transaction: a reference taken meanwhile under the same
        holder (a restarted raylet, a renewed lease) is never the one dropped."""
        now = time.time()
        db = self.conn()
        dead_pids = [(r[0], r[1]) for r in db.execute(
            "SELECT DISTINCT pid, pid_start FROM refs WHERE pid IS NOT NULL")
            if not pid_alive(r[0], r[1])]
        if not dead_pids and db.execute(_ANY_LEASE_ENDED, (now,)).fetchone() is None:
            return 0
        with self.tx() as tx:
            before = tx.total_changes
            tx.executemany("DELETE FROM refs WHERE pid=? AND pid_start IS ?", dead_pids)
            tx.execute(_DROP_LEASES_ENDED, (now,))
            return tx.total_changes - before
