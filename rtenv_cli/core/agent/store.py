"""The crash-safe store: packages, blobs and built entries, indexed in SQLite (WAL).

Layout under the root::

    index.sqlite        entries, refs, envs
    packages/<name>     Ray packages (verified against their name)
    blobs/ab/<sha256>   content-addressed files of the delta protocol
    entries/<key>/      published builds: meta.json (the completion marker) + tree/
    tmp/                builds in progress: <key>.<pid>.<rand>; published by rename
    trash/              tombstones: renamed here under the key's lock, then deleted
    locks/<key>.lock    one flock per key: identical creates build once across processes
    uv-cache/           uv's cache, shared by all venvs (hardlinked into them)

Every publish is "write elsewhere, fsync, rename"; the index row is written after the rename.
On open, `recover()` deletes builds whose builder died and tombstones, re-indexes published
entries missing from the index and forgets rows whose directory vanished. A SIGKILL at any point
therefore loses nothing published and never exposes a half-built entry.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import secrets
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

from rtenv_cli.core.agent.index import Entry, Index, pid_alive
from rtenv_cli.core.agent.rayhash import check_name, verify_package
from rtenv_cli.core.agent.unpack import dir_size
from rtenv_cli.core.errors import CacheBusyError, PackagingError
from rtenv_cli.core.fsutil import fsync_dir

SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
_KEY_SAFE = re.compile(r"[^A-Za-z0-9_.-]")
_CHUNK = 1 << 20


def safe_key(key: str) -> str:
    return _KEY_SAFE.sub("_", key)


class Store:
    def __init__(self, root: Path | None = None, *, recover: bool = True) -> None:
        from rtenv_cli.core.paths import store_root

        self.root = (Path(root) if root is not None else store_root()).absolute()
        for sub in ("packages", "blobs", "entries", "tmp", "trash", "locks"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        self.index = Index(self.root / "index.sqlite")
        self._thread_locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()
        if recover:
            self.recover()

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
            flock = FileLock(str(self.root / "locks" / f"{safe_key(key)}.lock"), thread_local=False)
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

    # -- generic build-and-publish ----------------------------------------------------------------
    def tmp_dir(self, key: str) -> Path:
        path = self.root / "tmp" / f"{safe_key(key)}.{os.getpid()}.{secrets.token_hex(4)}"
        path.mkdir(parents=True)
        return path

    def entry_dir(self, key: str) -> Path:
        return self.root / "entries" / safe_key(key)

    def get_or_build(self, key: str, *, kind: str, uri: str, label: str,
                     build: Callable[[Path], None]) -> Entry:
        """Return the published entry `key`, building it once (single flight) if missing.

        `build(tree)` fills the empty directory `tree`; on any exception nothing is left behind.
        """
        entry = self._ready(key)
        if entry is not None:
            return entry
        with self.lock(key):
            entry = self._ready(key)
            if entry is not None:
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
                (work / "meta.json").write_text(json.dumps(entry.to_dict()))
                final = self.entry_dir(key)
                if final.exists():  # a leftover without an index row: recover() re-indexes
                    self._tombstone(final)
                os.rename(work, final)
                fsync_dir(final.parent)
            except BaseException:
                shutil.rmtree(work, ignore_errors=True)
                raise
            self.index.put(entry)
            return entry

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
        return self.package_path(name).exists()

    def put_package(self, name: str, src: Path | BinaryIO, *,
                    expected_size: int | None = None) -> Entry:
        """Store a package after verifying its content against its name (nothing on failure)."""
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
                verify_package(name, tmp)
                os.rename(tmp, final)
                fsync_dir(final.parent)
            finally:
                shutil.rmtree(work, ignore_errors=True)
            now = time.time()
            entry = Entry(key=key, kind="package", uri=f"gcs://{name}", label=name,
                          path=f"packages/{name}", size_bytes=size, created_at=now,
                          last_used_at=now)
            self.index.put(entry)
            return entry

    # -- blobs ------------------------------------------------------------------------------------
    def blob_path(self, sha: str) -> Path:
        if not SHA256_RE.match(sha):
            raise PackagingError(f"invalid blob id {sha!r}", hint="blobs are named by sha256 hex")
        return self.root / "blobs" / sha[:2] / sha

    def has_blobs(self, shas: list[str]) -> set[str]:
        return {s for s in shas if self.blob_path(s).exists()}

    def put_blob(self, sha: str, src: Path | BinaryIO) -> Entry:
        final = self.blob_path(sha)
        key = f"blob:{sha}"
        if final.exists() and (entry := self.index.get(key)) is not None:
            return entry
        work = self.tmp_dir(key)
        try:
            tmp = work / "blob"
            h = hashlib.sha256()
            size = _copy_in(src, tmp, h)
            if h.hexdigest() != sha:
                raise PackagingError(f"blob {sha[:12]} does not match its content "
                                     f"(got {h.hexdigest()[:12]})", hint="upload it again")
            final.parent.mkdir(exist_ok=True)
            os.rename(tmp, final)  # same content under the same name: last rename wins, harmless
        finally:
            shutil.rmtree(work, ignore_errors=True)
        now = time.time()
        entry = Entry(key=key, kind="blob", uri=f"sha256:{sha}", label=sha[:12],
                      path=f"blobs/{sha[:2]}/{sha}", size_bytes=size, created_at=now,
                      last_used_at=now)
        self.index.put(entry)
        return entry

    def building(self) -> list[str]:
        """Names of builds in progress (temp dirs whose builder is alive): never gc'd."""
        out = []
        for work in (self.root / "tmp").iterdir():
            parts = work.name.rsplit(".", 2)
            if len(parts) == 3 and parts[1].isdigit() and pid_alive(int(parts[1]), None):  # noqa: PLR2004 - key.pid.rand
                out.append(parts[0])
        return out

    # -- removal ----------------------------------------------------------------------------------
    def remove(self, key: str) -> bool:
        """Delete an unreferenced entry that nobody is building. False if it is busy or held."""
        with self.lock(key, blocking=False) as got:
            if not got:
                return False
            with self.index.tx() as db:
                row = db.execute("SELECT path FROM entries WHERE key=?", (key,)).fetchone()
                if row is None:
                    return False
                if self.index.ref_count(db, key):
                    return False
                self.index.delete(db, key)
            self._tombstone(self.root / row["path"])
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

    # -- crash recovery ---------------------------------------------------------------------------
    def recover(self) -> None:
        """Finish or discard whatever a crash left behind (see the module doc)."""
        for grave in (self.root / "trash").iterdir():
            shutil.rmtree(grave, ignore_errors=True)
            with contextlib.suppress(OSError):
                grave.unlink()
        for work in (self.root / "tmp").iterdir():
            parts = work.name.rsplit(".", 2)
            pid = int(parts[1]) if len(parts) == 3 and parts[1].isdigit() else None  # noqa: PLR2004 - key.pid.rand
            if pid is None or pid == os.getpid() or not pid_alive(pid, None):
                if pid == os.getpid():
                    continue  # our own build in another thread
                shutil.rmtree(work, ignore_errors=True)
        known = {e.key: e for e in self.index.all()}
        for published in (self.root / "entries").iterdir():
            meta = published / "meta.json"
            if not meta.exists():
                shutil.rmtree(published, ignore_errors=True)
                continue
            data = json.loads(meta.read_text())
            if data["key"] not in known:
                data.pop("refs", None)
                self.index.put(Entry(**data))
        for rel, kind in self._loose_files():
            key = f"{kind}:{rel.rsplit('/', 1)[-1]}"
            if key not in known:  # published by rename, killed before the index row
                st = (self.root / rel).stat()
                name = rel.rsplit("/", 1)[-1]
                self.index.put(Entry(key=key, kind=kind,
                                     uri=f"gcs://{name}" if kind == "package" else f"sha256:{name}",
                                     label=name if kind == "package" else name[:12], path=rel,
                                     size_bytes=st.st_size, created_at=st.st_mtime,
                                     last_used_at=st.st_mtime))
        for entry in known.values():
            if not (self.root / entry.path).exists():
                with self.index.tx() as db:
                    self.index.delete(db, entry.key)
        self.index.prune_refs()

    def _loose_files(self) -> Iterator[tuple[str, str]]:
        for item in os.scandir(self.root / "packages"):
            if item.is_file():
                yield f"packages/{item.name}", "package"
        for shard in os.scandir(self.root / "blobs"):
            if shard.is_dir():
                for item in os.scandir(shard.path):
                    yield f"blobs/{shard.name}/{item.name}", "blob"


def _copy_in(src: Path | BinaryIO, dest: Path, hasher=None) -> int:  # type: ignore[no-untyped-def]
    size = 0
    reader = src.open("rb") if isinstance(src, Path) else contextlib.nullcontext(src)
    with reader as fh, dest.open("wb") as out:
        while chunk := fh.read(_CHUNK):
            size += len(chunk)
            if hasher is not None:
                hasher.update(chunk)
            out.write(chunk)
        out.flush()
        os.fsync(out.fileno())
    return size
