"""The crash-safe store: packages, blobs and built entries, indexed in SQLite (WAL).

Layout under the root::

    index.sqlite        entries, refs, envs
    packages/<name>     Ray packages (verified against their name)
    manifests/<name>.json  packages published by the delta protocol: entries over blobs/ (the
                        zip is assembled into packages/ when first needed)
    blobs/ab/<sha256>   content-addressed files of the delta protocol
    entries/<key>/      published builds: meta.json (the completion marker) + tree/
    tmp/                builds in progress: <key>.<pid>.<rand>; published by rename
    trash/              tombstones: renamed here under the key's lock, then deleted
    locks/<key>.lock    one flock per key: identical creates build once across processes
                        (removed with its entry)
    quarantine/         what recovery could not read (a torn meta.json, ...), kept for a look
    owners.lock         every process with the store open holds it shared
    uv-cache/           uv's cache, shared by all venvs (hardlinked into them)

Every publish is "write elsewhere, fsync, rename"; the index row is written after the rename.
On open, `recover()` deletes builds whose builder died and tombstones, re-indexes published
entries missing from the index and forgets rows whose directory vanished. A SIGKILL at any point
therefore loses nothing published and never exposes a half-built entry. A process that finds
itself alone (it gets `owners.lock` exclusively) also clears everything else in tmp/ (upload
spool files) and the lock files. An index SQLite cannot read is set aside as
`index.sqlite.corrupt-<time>` and rebuilt from the directories; an entry whose files cannot be
read goes to quarantine/. Each is logged in one line.

An upload (package, manifest, blob) is pinned for `pin_s` (Ray's 10 minutes by default,
`RTENV_UPLOAD_PIN_S`): a pin is a reference row with an expiry, so gc never removes what was
just pushed and is not yet referenced by the environment it is pushed for.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import logging
import os
import re
import secrets
import shutil
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, BinaryIO, Protocol

from rtenv_cli.core.errors import CacheBusyError, DiskFullError, PackagingError, RtenvError
from rtenv_cli.core.fsutil import fsync_dir
from rtenv_cli.core.store.index import WAL_LIMIT, Entry, Index, pid_alive
from rtenv_cli.core.store.rayhash import ContentMismatchError, check_name, verify_package
from rtenv_cli.core.store.unpack import dir_size

try:
    import fcntl
except ImportError:  # not POSIX
    fcntl = None  # type: ignore[assignment]

SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
_KEY_SAFE = re.compile(r"[^A-Za-z0-9_.-]")
_CHUNK = 1 << 20
PIN_ENV_VAR = "RTENV_UPLOAD_PIN_S"
UPLOAD_PIN_S = 600.0  # Ray's RAY_RUNTIME_ENV_TEMPORARY_REFERENCE_EXPIRATION_S default
_NO_SPACE = (errno.ENOSPC, errno.EDQUOT)
log = logging.getLogger("rtenv.store")


def safe_key(key: str) -> str:
    return _KEY_SAFE.sub("_", key)


class _Stream(Protocol):
    """What a blob batch is read from: a file, or a request body (agent.bodyreader)."""

    def read(self, n: int = -1, /) -> bytes: ...

    def readline(self, limit: int = -1, /) -> bytes: ...


def _pin_seconds() -> float:
    try:
        return max(0.0, float(os.environ.get(PIN_ENV_VAR, UPLOAD_PIN_S)))
    except ValueError:
        return UPLOAD_PIN_S


class Store:
    def __init__(self, root: Path | None = None, *, recover: bool = True,
                 pin_s: float | None = None) -> None:
        from rtenv_cli.core.paths import store_root

        private = root is None  # the per-user default under RTENV_HOME: nobody else's business
        self.root = (Path(root) if root is not None else store_root()).absolute()
        self.root.mkdir(parents=True, exist_ok=True, mode=0o700 if private else 0o777)
        if private and self.root.stat().st_mode & 0o077:
            with contextlib.suppress(OSError):  # e.g. not its owner: it stays as it is
                self.root.chmod(0o700)
        for sub in ("packages", "manifests", "blobs", "entries", "tmp", "trash", "locks"):
            (self.root / sub).mkdir(exist_ok=True)
        self.pin_s = _pin_seconds() if pin_s is None else pin_s
        self._thread_locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()
        self._manifests: dict[str, dict[str, Any]] = {}  # a few recent ones, the bases of edits
        self._in_use: tuple[tuple[Any, ...], frozenset[str]] | None = None
        alone = self._hold_owners()
        self.index = self._open_index()
        if recover:
            self.recover(alone=alone)
        if alone and fcntl is not None:  # from here on, others may open it too
            fcntl.flock(self._owners, fcntl.LOCK_SH)

    def _hold_owners(self) -> bool:
        """Hold owners.lock shared for this Store's life; True if this process had it
        exclusively first (no other Store is open on this root, in any process)."""
        self._owners = os.open(self.root / "owners.lock", os.O_RDWR | os.O_CREAT, 0o600)
        weakref.finalize(self, os.close, self._owners)
        if fcntl is None:
            return False
        try:
            fcntl.flock(self._owners, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fcntl.flock(self._owners, fcntl.LOCK_SH)  # waits out another's exclusive recovery
            return False
        return True

    def close(self) -> None:
        """Close the index and let go of owners.lock (the Store is unusable afterwards)."""
        self.index.close()
        if fcntl is not None:
            fcntl.flock(self._owners, fcntl.LOCK_UN)

    def _open_index(self) -> Index:
        index = None
        try:
            index = Index(self.root / "index.sqlite")
            index.conn().execute("SELECT COUNT(*) FROM entries").fetchone()
        except sqlite3.DatabaseError as exc:
            if not _corrupt(exc):
                raise
            return self._rebuild_index(exc, index)
        return index

    def _rebuild_index(self, exc: Exception, old: Index | None = None) -> Index:
        """Set an unreadable index aside (`index.sqlite.corrupt-<time>`) and start an empty
        one; recover() then fills it from the directories."""
        if old is not None:
            old.close()
        stamp = time.strftime("%Y%m%dT%H%M%S")
        base = self.root / "index.sqlite"
        for suffix in ("", "-wal", "-shm"):
            with contextlib.suppress(FileNotFoundError):
                os.replace(f"{base}{suffix}", f"{base}.corrupt-{stamp}{suffix}")
        log.warning("rtenv store %s: index.sqlite unreadable (%s); set aside as "
                    "index.sqlite.corrupt-%s, rebuilt from the directories", self.root, exc, stamp)
        return Index(base)

    @staticmethod
    def out_of_space(exc: BaseException) -> bool:
        return _out_of_space(exc)

    def disk_full(self, exc: OSError) -> DiskFullError:
        """The error for a full disk under the store (ENOSPC, quota): not the input's fault."""
        return DiskFullError(f"no space left under {self.root} ({exc.strerror})",
                             hint=f"free space under {self.root} or lower --max-size",
                             path=str(self.root))

    # -- locking ----------------------------------------------------------------------------------
    @contextlib.contextmanager
    def lock(self, key: str, *, blocking: bool = True) -> Iterator[bool]:
        """Hold `key` exclusively in this process (thread lock) and across processes (flock).

        Yields False when `blocking` is off and someone else holds it.
        """
        from filelock import FileLock, Timeout

        with self._guard:
            tlock = self._thread_locks.setdefault(key, threading.Lock())
        if not tlock.acquire(blocking=blocking):
            yield False
            return
        try:
            path = self._lock_path(key)
            if fcntl is not None:
                fd = _flock_file(path, blocking=blocking)
                if fd is None:
                    yield False
                    return
                try:
                    yield True
                finally:
                    os.close(fd)  # closing the descriptor releases the flock
                return
            flock = FileLock(str(path), thread_local=False)
            try:
                flock.acquire(timeout=-1 if blocking else 0, poll_interval=0.02)
            except Timeout:
                yield False
                return
            try:
                yield True
            finally:
                flock.release()
        finally:
            tlock.release()

    def _lock_path(self, key: str) -> Path:
        return self.root / "locks" / f"{safe_key(key)}.lock"

    # -- generic build-and-publish ----------------------------------------------------------------
    def tmp_dir(self, key: str) -> Path:
        path = self.root / "tmp" / f"{safe_key(key)}.{os.getpid()}.{secrets.token_hex(4)}"
        path.mkdir(parents=True)
        return path

    def entry_dir(self, key: str) -> Path:
        return self.root / "entries" / safe_key(key)

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
        with self.lock(key):  # remove() cannot run meanwhile: it never waits for the lock
            entry = self._ready(key)
            if entry is not None:
                self._hold(key, hold)
                return entry
            work = self.tmp_dir(key)
            try:
                tree = work / "tree"
                tree.mkdir()
                build(tree)
                now = time.time()
                entry = Entry(key=key, kind=kind, uri=uri, label=label,
                              path=f"entries/{safe_key(key)}", size_bytes=dir_size(tree),
                              created_at=now, last_used_at=now)
                _sync_fs(work)  # the tree's files reach the disk before the marker names them
                _write_synced(work / "meta.json", json.dumps(entry.to_dict()).encode())
                final = self.entry_dir(key)
                if final.exists():  # a leftover without an index row: recover() re-indexes
                    self._tombstone(final)
                os.rename(work, final)
                fsync_dir(final.parent)
            except BaseException as exc:
                shutil.rmtree(work, ignore_errors=True)
                if _out_of_space(exc):
                    raise self.disk_full(_as_oserror(exc)) from exc
                raise
            self.index.put(entry)
            self._hold(key, hold)
            return entry

    def _hold(self, key: str, token: str | None) -> bool:
        if token is None:
            return True
        with self.index.tx() as db:
            return self.index.hold_for_create(db, key, token)

    def _ready(self, key: str) -> Entry | None:
        entry = self.index.get(key)
        if entry is None:
            return None
        if not (self.root / entry.path).exists():
            with self.index.tx() as db:
                self.index.delete(db, key)
            return None
        return entry

    # -- packages ---------------------------------------------------------------------------------
    def package_path(self, name: str) -> Path:
        check_name(name)
        return self.root / "packages" / name

    def has_package(self, name: str) -> bool:
        return self.package_path(name).exists() or self.manifest_path(name).exists()

    def package_size(self, name: str) -> int | None:
        entry = self.index.get(f"package:{name}")
        return entry.size_bytes if entry is not None else None

    def package_file(self, name: str) -> Path:
        """The package's zip, assembled from its manifest's blobs if it was pushed as a delta."""
        def write(tmp: Path) -> None:
            doc = self.load_manifest(name)
            if doc is None:
                raise PackagingError(f"package gcs://{name} is not in the store",
                                     hint="rtenv push it first")
            _zip_manifest(self, doc, tmp)

        return self._materialize(self.package_path(name), f"package:{name}", write)

    def remote_file(self, name: str) -> Path:
        """The package as a remote zip for Ray's nodes (`http://.../download/...`): its members
        under one top-level directory, which Ray strips from remote zips (and only from those).
        Made once from the stored package by raw member copies, then kept beside it."""
        source = self.package_file(name)
        return self._materialize(self.root / "packages" / f"{name}.remote", f"package:{name}",
                                 lambda tmp: _prefixed_copy(source, tmp, "pkg/"))

    def _materialize(self, final: Path, key: str, write: Callable[[Path], None]) -> Path:
        """`final`, written once by `write(tmp)` under `key`'s lock and published by rename."""
        if final.exists():
            return final
        with self.lock(key):
            if final.exists():
                return final
            work = self.tmp_dir(f"{key}:{final.name}")
            try:
                tmp = work / final.name
                write(tmp)
                os.rename(tmp, final)
                fsync_dir(final.parent)
            except OSError as exc:
                if exc.errno in _NO_SPACE:
                    raise self.disk_full(exc) from exc
                raise
            finally:
                shutil.rmtree(work, ignore_errors=True)
            if key.startswith("package:"):  # one more file of the package on disk: count it
                self.index.set_size(key, self._package_bytes(key.removeprefix("package:")))
        return final

    def _package_bytes(self, name: str) -> int:
        """What a package takes on disk: its zip, manifest and remote copy, whichever exist
        (its blobs are entries of their own)."""
        total = 0
        for path in (self.package_path(name), self.manifest_path(name),
                     self.root / "packages" / f"{name}.remote"):
            with contextlib.suppress(FileNotFoundError):
                total += _disk_bytes(path.stat())
        return total

    # -- manifests (delta packages) ---------------------------------------------------------------
    def manifest_path(self, name: str) -> Path:
        check_name(name)
        return self.root / "manifests" / f"{name}.json"

    def load_manifest(self, name: str) -> dict[str, Any] | None:
        doc = self._manifests.get(name)
        if doc is not None:
            return doc
        path = self.manifest_path(name)
        try:
            doc = json.loads(path.read_bytes())
            if not isinstance(doc, dict) or not isinstance(doc.get("entries"), list):
                raise ValueError("not a manifest")
        except FileNotFoundError:
            return None
        except ValueError as exc:  # torn or foreign: the package is gone, not the store
            self._quarantine(path, f"manifest unreadable ({exc})")
            with self.index.tx() as db:
                self.index.delete(db, f"package:{name}")
            return None
        self._remember(name, doc)
        return doc

    def _remember(self, name: str, doc: dict[str, Any]) -> None:
        with self._guard:
            self._manifests[name] = doc
            while len(self._manifests) > 4:  # noqa: PLR2004 - the bases of recent edits
                self._manifests.pop(next(iter(self._manifests)))

    def put_manifest(self, name: str, doc: dict[str, Any], size_bytes: int) -> Entry:
        """Publish a verified manifest (atomic write); blobs it names are kept by gc."""
        key = f"package:{name}"
        with self.lock(key):
            if (entry := self.index.get(key)) is not None and self.has_package(name):
                return entry
            final = self.manifest_path(name)
            work = self.tmp_dir(key)  # in tmp/, as every write: a kill leaves it to recover()
            try:
                _write_synced(work / "manifest.json",
                              json.dumps(doc, separators=(",", ":")).encode())
                os.rename(work / "manifest.json", final)
                fsync_dir(final.parent)
            except OSError as exc:
                if exc.errno in _NO_SPACE:
                    raise self.disk_full(exc) from exc
                raise
            finally:
                shutil.rmtree(work, ignore_errors=True)
            self._remember(name, doc)
            del size_bytes  # the files are counted as blobs; the package is its manifest
            return self._index_package(name, f"manifests/{name}.json",
                                       self._package_bytes(name))

    def hold_package(self, name: str) -> bool:
        """Whether the store holds the package; if so it is pinned for `pin_s` from now. The
        check and the pin are one transaction under the package's lock, so a gc either
        removed it before (False) or finds it pinned: Ray's GET of a package does the same."""
        key = f"package:{name}"
        with self.lock(key):
            with self.index.tx() as db:
                if not self.index.pin(db, [key], self.pin_s):
                    return False
            return self.has_package(name)

    def blobs_in_use(self) -> frozenset[str]:
        """Every blob a published manifest names (gc must keep them)."""
        listing = sorted((e.name, e.stat().st_mtime_ns)
                         for e in os.scandir(self.root / "manifests") if e.name.endswith(".json"))
        stamp = tuple(listing)
        if self._in_use is not None and self._in_use[0] == stamp:
            return self._in_use[1]
        shas: set[str] = set()
        for fname, _mtime in listing:
            try:
                doc = self.load_manifest(fname.removesuffix(".json"))
            except PackagingError:  # not a package name: not one of ours
                continue
            if doc is not None:
                shas.update(row[4] for row in doc["entries"]
                            if isinstance(row, list) and len(row) > 4 and row[4])  # noqa: PLR2004 - a manifest row's sha256
        result = frozenset(shas)
        self._in_use = (stamp, result)
        return result

    def put_package(self, name: str, src: Path | BinaryIO, *,
                    expected_size: int | None = None,
                    extra_dirs: Sequence[str] = ()) -> Entry:
        """Store a package after verifying its content against its name (nothing on failure).
        `extra_dirs`: what packaging's `hashed_not_zipped` lists for it (names Ray hashed that
        its zip cannot show); without them such a package cannot be verified and is refused."""
        final = self.package_path(name)
        key = f"package:{name}"
        with self.lock(key):
            if final.exists() and (entry := self.index.get(key)) is not None:
                return entry
            work = self.tmp_dir(key)
            try:
                tmp = work / name
                size = _copy_in(src, tmp)
                if expected_size is not None and size != expected_size:
                    raise PackagingError(f"upload of {name} truncated: {size} of "
                                         f"{expected_size} bytes", hint="push it again")
                _verify(name, tmp, extra_dirs)
                os.rename(tmp, final)
                fsync_dir(final.parent)
            except OSError as exc:
                if exc.errno in _NO_SPACE:
                    raise self.disk_full(exc) from exc
                raise
            finally:
                shutil.rmtree(work, ignore_errors=True)
            return self._index_package(name, f"packages/{name}", self._package_bytes(name))

    def _index_package(self, name: str, rel: str, size: int) -> Entry:
        now = time.time()
        entry = Entry(key=f"package:{name}", kind="package", uri=f"gcs://{name}", label=name,
                      path=rel, size_bytes=size, created_at=now, last_used_at=now)
        self.index.put(entry, pin_s=self.pin_s)
        return entry

    # -- blobs ------------------------------------------------------------------------------------
    def blob_path(self, sha: str) -> Path:
        if not SHA256_RE.match(sha):
            raise PackagingError(f"invalid blob id {sha!r}", hint="blobs are named by sha256 hex")
        return self.root / "blobs" / sha[:2] / sha

    def has_blobs(self, shas: list[str]) -> set[str]:
        """The blobs of `shas` the store holds, each pinned for `pin_s` from now (until the
        manifest that names them is committed), in one transaction with the check."""
        paths = {s: self.blob_path(s) for s in shas}
        with self.index.tx() as db:
            pinned = self.index.pin(db, [f"blob:{s}" for s in paths], self.pin_s)
        return {k.removeprefix("blob:") for k in pinned
                if paths[k.removeprefix("blob:")].exists()}

    def put_blob(self, sha: str, src: Path | BinaryIO | _Limited, *,
                 fsync: bool = True) -> Entry:
        """Store one blob, verified against its sha256. `fsync=False` is for batches
        (`put_blobs`, `put_blob_files`), which make their blobs durable together."""
        final = self.blob_path(sha)
        key = f"blob:{sha}"
        if final.exists() and (entry := self.index.get(key)) is not None:
            return entry
        work = self.tmp_dir(key)
        try:
            tmp = work / "blob"
            h = hashlib.sha256()
            _copy_in(src, tmp, h, fsync=fsync)
            if h.hexdigest() != sha:
                raise PackagingError(f"blob {sha[:12]} does not match its content "
                                     f"(got {h.hexdigest()[:12]})", hint="upload it again")
            final.parent.mkdir(exist_ok=True)
            os.rename(tmp, final)  # same content under the same name: last rename wins, harmless
            size = _disk_bytes(final.stat())
        except OSError as exc:
            if exc.errno in _NO_SPACE:
                raise self.disk_full(exc) from exc
            raise
        finally:
            shutil.rmtree(work, ignore_errors=True)
        now = time.time()
        entry = Entry(key=key, kind="blob", uri=f"sha256:{sha}", label=sha[:12],
                      path=f"blobs/{sha[:2]}/{sha}", size_bytes=size, created_at=now,
                      last_used_at=now)
        self.index.put(entry, pin_s=self.pin_s)  # its manifest is committed after it
        return entry

    def put_blobs(self, stream: BinaryIO | _Stream) -> int:
        """Store a batch of blobs from `stream`: records of `<sha256 hex> <size>\\n<bytes>`.

        Each blob is verified like `put_blob`; the batch is made durable with one sync at the
        end instead of one fsync per file (10,000 small files: seconds, not minutes).
        """
        count = 0
        try:
            while header := stream.readline(200):
                try:
                    sha, size_text = header.decode("ascii").split()
                    size = int(size_text)
                except (UnicodeDecodeError, ValueError):
                    raise PackagingError(f"bad blob record header {header[:80]!r}",
                                         hint="records are '<sha256 hex> <size>\\n<bytes>'"
                                         ) from None
                body = _Limited(stream, size)
                if self.blob_path(sha).exists():  # already here: skip its bytes
                    while body.read(_CHUNK):
                        pass
                else:
                    self.put_blob(sha, body, fsync=False)
                count += 1
        finally:
            if count:
                _sync_fs(self.root)  # one flush for the batch
        return count

    def put_blob_files(self, blobs: Sequence[tuple[str, Path]]) -> None:
        """`put_blob` for many local files, made durable together as `put_blobs` does."""
        try:
            for sha, path in blobs:
                self.put_blob(sha, Path(path), fsync=False)
        finally:
            if blobs:
                _sync_fs(self.root)  # one flush for the batch

    def building(self) -> list[str]:
        """Names of builds in progress (temp dirs whose builder is alive): never gc'd."""
        out = []
        for work in (self.root / "tmp").iterdir():
            pid = _owner_pid(work.name)
            if pid is not None and work.is_dir() and pid_alive(pid, None):
                out.append(work.name.rsplit(".", 2)[0])
        return out

    # -- removal ----------------------------------------------------------------------------------
    def remove(self, key: str) -> bool:
        """Delete an unreferenced entry that nobody is building. False if it is busy or held."""
        with self.lock(key, blocking=False) as got:
            if not got:
                return False
            if key.startswith("blob:") and key.removeprefix("blob:") in self.blobs_in_use():
                return False  # a published manifest package is made of it
            with self.index.tx() as db:
                row = db.execute("SELECT path FROM entries WHERE key=?", (key,)).fetchone()
                if row is None:
                    return False
                if self.index.ref_count(db, key):
                    return False
                self.index.delete(db, key)
                db.execute("DELETE FROM refs WHERE entry_key=?", (key,))  # ended ones
            self._tombstone(self.root / row["path"])
            if key.startswith("package:"):  # a delta package may have both forms
                name = key.removeprefix("package:")
                self._manifests.pop(name, None)
                for path in (self.package_path(name), self.manifest_path(name),
                             self.root / "packages" / f"{name}.remote"):
                    if path.exists():
                        path.unlink()
            # the lock file goes with its entry; one waiting on it retries on a fresh file
            self._lock_path(key).unlink(missing_ok=True)
            return True

    def remove_or_raise(self, key: str) -> None:
        if not self.remove(key):
            raise CacheBusyError(f"{key} is referenced or being built",
                                 hint="release it first, or wait for the build")

    def _tombstone(self, path: Path) -> None:
        if not path.exists():
            return
        grave = self.root / "trash" / f"{path.name}.{secrets.token_hex(4)}"
        os.rename(path, grave)
        shutil.rmtree(grave, ignore_errors=True)
        with contextlib.suppress(FileNotFoundError):
            grave.unlink()

    def _quarantine(self, path: Path, why: str) -> None:
        """Move what cannot be read out of the store's way, kept for a look; one log line."""
        dest = self.root / "quarantine" / f"{path.name}.{time.strftime('%Y%m%dT%H%M%S')}" \
            f".{secrets.token_hex(2)}"
        dest.parent.mkdir(exist_ok=True)
        try:
            os.rename(path, dest)
        except FileNotFoundError:
            return
        log.warning("rtenv store %s: %s: %s; moved to %s", self.root,
                    path.relative_to(self.root), why, dest.relative_to(self.root))

    # -- crash recovery ---------------------------------------------------------------------------
    def recover(self, *, alone: bool = False) -> None:
        """Finish or discard whatever a crash left behind (see the module doc). `alone`: no
        other process has the store open, so nothing in tmp/ or locks/ is anyone's."""
        for grave in (self.root / "trash").iterdir():
            _remove_path(grave)
        for work in (self.root / "tmp").iterdir():
            pid = _owner_pid(work.name)
            if pid == os.getpid():
                continue  # our own build or upload, in another thread
            if alone or (pid is not None and not pid_alive(pid, None)):
                _remove_path(work)
        if alone:
            for lock in (self.root / "locks").iterdir():
                lock.unlink(missing_ok=True)
        try:
            self._reindex()
        except sqlite3.DatabaseError as exc:  # readable at open, unreadable further in
            if not _corrupt(exc):
                raise
            self.index = self._rebuild_index(exc, self.index)
            self._reindex()
        if alone or self.index.wal_bytes() > WAL_LIMIT:
            with contextlib.suppress(sqlite3.OperationalError):  # busy: the agent's thread will
                self.index.truncate_wal()  # a WAL grown before a restart is given back

    def _reindex(self) -> None:
        known = {e.key: e for e in self.index.all()}
        for published in (self.root / "entries").iterdir():
            meta = published / "meta.json"
            if not meta.exists():
                _remove_path(published)
                continue
            try:
                data = json.loads(meta.read_bytes())
                data.pop("refs", None)
                entry = Entry(**data)
                if entry.path != f"entries/{published.name}":
                    raise ValueError(f"names another directory ({entry.path})")
            except (ValueError, TypeError) as exc:  # torn by a power loss, or foreign
                self._quarantine(published, f"meta.json unreadable ({exc})")
                continue
            if entry.key not in known:
                self.index.put(entry)
        for rel, kind in self._loose_files():
            name = rel.rsplit("/", 1)[-1]
            if rel.startswith("manifests/"):
                name = name.removesuffix(".json")
            key = f"{kind}:{name}"
            path = self.root / rel
            if key not in known:  # published by rename, killed before the index row
                st = path.stat()
                if kind == "package" and st.st_size == 0:  # torn: not a package
                    self._quarantine(path, "empty file")
                    continue
                known[key] = Entry(key, kind, "", "", rel, 0, 0.0, 0.0)
                self.index.put(Entry(key=key, kind=kind,
                                     uri=f"gcs://{name}" if kind == "package" else f"sha256:{name}",
                                     label=name if kind == "package" else name[:12], path=rel,
                                     size_bytes=_disk_bytes(st), created_at=st.st_mtime,
                                     last_used_at=st.st_mtime))
        for entry in known.values():
            if not (self.root / entry.path).exists():
                with self.index.tx() as db:
                    self.index.delete(db, entry.key)
        self.index.prune_refs()
        self.forget_dead_envs()

    def forget_dead_envs(self) -> None:
        """Drop environments nobody holds whose entries are all gone (they are rebuilt, and
        listed again, by the next create)."""
        db = self.index.conn()
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
            with self.index.tx() as tx:
                tx.executemany("DELETE FROM envs WHERE key=?", dead)

    def _loose_files(self) -> Iterator[tuple[str, str]]:
        for item in os.scandir(self.root / "manifests"):
            if item.is_file() and item.name.endswith(".json"):
                yield f"manifests/{item.name}", "package"
        for item in os.scandir(self.root / "packages"):
            if item.is_file() and not item.name.endswith(".remote"):  # a rendition, not a package
                yield f"packages/{item.name}", "package"
        for shard in os.scandir(self.root / "blobs"):
            if shard.is_dir():
                for item in os.scandir(shard.path):
                    yield f"blobs/{shard.name}/{item.name}", "blob"


def _verify(name: str, path: Path, extra_dirs: Sequence[str]) -> None:
    try:
        verify_package(name, path, extra_dirs=extra_dirs)
    except ContentMismatchError as exc:
        if extra_dirs:
            raise
        raise ContentMismatchError(
            f"{exc.message}; if the tree has folders whose files were all excluded "
            "(.gitignore, .rayignore, excludes), Ray hashes their names but its zip omits "
            "them, so the zip alone cannot be checked against its name",
            hint="push it with `rtenv push`, which declares those folders (the "
            "X-Rtenv-Hashed-Dirs header); else it was truncated or altered: push again",
            path=name) from exc


def _corrupt(exc: sqlite3.DatabaseError) -> bool:
    """SQLite found the file damaged or not a database (busy, locked, full are other errors:
    its subclasses)."""
    return type(exc) is sqlite3.DatabaseError


def _owner_pid(name: str) -> int | None:
    """The pid in a tmp/ name (`<key>.<pid>.<rand>`, `upload.<pid>.<rand>`), if any."""
    parts = name.rsplit(".", 2)
    return int(parts[1]) if len(parts) == 3 and parts[1].isdigit() else None  # noqa: PLR2004 - key.pid.rand


def _remove_path(path: Path) -> None:
    """Remove a file, link or directory tree, whichever it is (a spool file is a file)."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(OSError):
            path.unlink()


def _disk_bytes(st: os.stat_result) -> int:
    """A file's size on disk, as du counts it (the allocated blocks)."""
    return st.st_blocks * 512 if hasattr(st, "st_blocks") else st.st_size


def _flock_file(path: Path, *, blocking: bool) -> int | None:
    """An fd holding `path` locked (flock), or None if `blocking` is off and it is taken.

    The lock file may be removed with its entry while others wait on it: a lock won on a
    file that no longer has that name is let go and taken again on the current one.
    """
    assert fcntl is not None  # noqa: S101 - callers check
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        except BlockingIOError:
            os.close(fd)
            return None
        except BaseException:
            os.close(fd)
            raise
        try:
            if os.stat(path).st_ino == os.fstat(fd).st_ino:
                return fd
        except FileNotFoundError:
            pass
        os.close(fd)


def _sync_fs(path: Path) -> None:
    """Flush the file system holding `path` (syncfs(2) where libc has it, else sync(2))."""
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        syncfs = libc.syncfs
    except (OSError, AttributeError):
        os.sync()
        return
    fd = os.open(path, os.O_RDONLY)
    try:
        if syncfs(fd) != 0:
            os.sync()
    finally:
        os.close(fd)


def _write_synced(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)


def _out_of_space(exc: BaseException) -> bool:
    """An exception caused by a full disk: an OSError ENOSPC/EDQUOT, or a build tool's error
    (uv's) that reports one in its text."""
    if isinstance(exc, DiskFullError):
        return False  # already said
    if isinstance(exc, OSError):
        return exc.errno in _NO_SPACE
    return isinstance(exc, RtenvError) and ("No space left on device" in exc.message
                                            or "Disk quota exceeded" in exc.message)


def _as_oserror(exc: BaseException) -> OSError:
    return exc if isinstance(exc, OSError) else OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


class _Limited:
    """The next `size` bytes of a stream, as a file for `_copy_in`; short input is an error."""

    def __init__(self, stream: BinaryIO | _Stream, size: int) -> None:
        self.stream, self.left = stream, size

    def read(self, n: int = -1) -> bytes:
        if self.left <= 0:
            return b""
        want = self.left if n < 0 else min(n, self.left)
        data = self.stream.read(want)
        if not data:
            raise PackagingError(f"blob batch truncated ({self.left} bytes short)",
                                 hint="upload the batch again")
        self.left -= len(data)
        return data


class _Hasher(Protocol):
    def update(self, data: bytes, /) -> None: ...


def _copy_in(src: Path | BinaryIO | _Limited, dest: Path, hasher: _Hasher | None = None, *,
             fsync: bool = True) -> int:
    size = 0
    reader = src.open("rb") if isinstance(src, Path) else contextlib.nullcontext(src)
    with reader as fh, dest.open("wb") as out:
        while chunk := fh.read(_CHUNK):
            size += len(chunk)
            if hasher is not None:
                hasher.update(chunk)
            out.write(chunk)
        out.flush()
        if fsync:
            os.fsync(out.fileno())
    return size


def _zip_manifest(store: Store, doc: dict[str, Any], out: Path) -> None:
    """Write the zip of a manifest package with packaging's writer, from the blobs: what
    `rtenv push` writes for the same tree (members, names, modes, compression, order). Rows
    carry whether a directory is zipped and each member's date_time as the client's zip has
    it; a manifest from before those fields zips every directory row, dated 1980-01-01."""
    import stat as stat_mod

    from rtenv_cli.core.packaging.build import ZIP_EPOCH, write_package_zip
    from rtenv_cli.core.packaging.walk import Entry, PackageScan

    entries: list[Entry] = []
    times: dict[str, Any] = {}  # relpath -> date_time
    for row in doc["entries"]:
        path, is_dir, mode, _size, sha = row[:5]
        in_zip = bool(row[6]) if len(row) > 6 else True  # noqa: PLR2004 - the row's fields
        when = row[7] if len(row) > 7 else None  # noqa: PLR2004 - the row's fields
        times[path] = tuple(when) if when else ZIP_EPOCH
        if is_dir:
            entries.append(Entry(path, "", True, 0, stat_mod.S_IFDIR | (mode & 0o7777), 0,
                                 in_zip=in_zip))
            continue
        blob = store.blob_path(sha)
        st = blob.stat()
        entries.append(Entry(path, str(blob), False, st.st_size,
                             stat_mod.S_IFREG | (mode & 0o7777), st.st_mtime_ns, st.st_ino))
    kind = "py_module" if doc.get("kind") == "py_module" and doc.get("name") else "working_dir"
    files = [e for e in entries if not e.is_dir]
    scan = PackageScan(Path(str(doc.get("name") or "pkg")), kind, tuple(entries), len(files),
                       sum(e.size for e in files))
    result = write_package_zip(scan, out, times=times, processes=False)  # in a server
    if result.changed:  # blobs are immutable: only disk trouble changes one
        raise PackagingError(f"blob of {result.changed[0].relpath} changed while it was zipped",
                             hint="run `rtenv cache purge` on the agent and push again")
    with out.open("rb+") as fh:
        os.fsync(fh.fileno())


def _prefixed_copy(source: Path, out: Path, prefix: str) -> None:
    """Copy every member of zip `source` into `out` under `prefix`, raw (no recompression):
    the bytes packaging's writer gives with `layout="remote"` for the same members."""
    import zipfile

    from rtenv_cli.core.packaging.zipreuse import ZipAppender

    with zipfile.ZipFile(source) as src, open(out, "w+b", buffering=1 << 20) as fh, \
            zipfile.ZipFile(fh, "w", allowZip64=True) as dst:
        appender = ZipAppender(dst)
        for info in src.infolist():
            appender.copy_member(src, info, prefix + info.filename)
    with out.open("rb+") as fh:
        os.fsync(fh.fileno())
