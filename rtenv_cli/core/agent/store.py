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
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, BinaryIO

from rtenv_cli.core.agent.index import Entry, Index, pid_alive
from rtenv_cli.core.agent.rayhash import ContentMismatchError, check_name, verify_package
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
        for sub in ("packages", "manifests", "blobs", "entries", "tmp", "trash", "locks"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        self.index = Index(self.root / "index.sqlite")
        self._thread_locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()
        self._manifests: dict[str, dict[str, Any]] = {}  # a few recent ones, the bases of edits
        self._in_use: tuple[tuple[Any, ...], frozenset[str]] | None = None
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
            finally:
                shutil.rmtree(work, ignore_errors=True)
        return final

    # -- manifests (delta packages) ---------------------------------------------------------------
    def manifest_path(self, name: str) -> Path:
        check_name(name)
        return self.root / "manifests" / f"{name}.json"

    def load_manifest(self, name: str) -> dict[str, Any] | None:
        doc = self._manifests.get(name)
        if doc is not None:
            return doc
        try:
            doc = json.loads(self.manifest_path(name).read_bytes())
        except FileNotFoundError:
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
        from rtenv_cli.core.fsutil import atomic_write_bytes

        key = f"package:{name}"
        with self.lock(key):
            if (entry := self.index.get(key)) is not None and self.has_package(name):
                return entry
            atomic_write_bytes(self.manifest_path(name),
                               json.dumps(doc, separators=(",", ":")).encode())
            self._remember(name, doc)
            return self._index_package(name, f"manifests/{name}.json", size_bytes)

    def blobs_in_use(self) -> frozenset[str]:
        """Every blob a published manifest names (gc must keep them)."""
        listing = sorted((e.name, e.stat().st_mtime_ns)
                         for e in os.scandir(self.root / "manifests") if e.name.endswith(".json"))
        stamp = tuple(listing)
        if self._in_use is not None and self._in_use[0] == stamp:
            return self._in_use[1]
        shas: set[str] = set()
        for fname, _mtime in listing:
            doc = self.load_manifest(fname.removesuffix(".json"))
            if doc is not None:
                shas.update(row[4] for row in doc["entries"] if row[4])
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
            finally:
                shutil.rmtree(work, ignore_errors=True)
            return self._index_package(name, f"packages/{name}", size)

    def _index_package(self, name: str, rel: str, size: int) -> Entry:
        now = time.time()
        entry = Entry(key=f"package:{name}", kind="package", uri=f"gcs://{name}", label=name,
                      path=rel, size_bytes=size, created_at=now, last_used_at=now)
        self.index.put(entry)
        return entry

    # -- blobs ------------------------------------------------------------------------------------
    def blob_path(self, sha: str) -> Path:
        if not SHA256_RE.match(sha):
            raise PackagingError(f"invalid blob id {sha!r}", hint="blobs are named by sha256 hex")
        return self.root / "blobs" / sha[:2] / sha

    def has_blobs(self, shas: list[str]) -> set[str]:
        return {s for s in shas if self.blob_path(s).exists()}

    def put_blob(self, sha: str, src: Path | BinaryIO, *, fsync: bool = True) -> Entry:
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
            size = _copy_in(src, tmp, h, fsync=fsync)
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

    def put_blobs(self, stream: BinaryIO) -> int:
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
                os.sync()  # one flush for the batch; Python has no syncfs(2)
        return count

    def put_blob_files(self, blobs: Sequence[tuple[str, Path]]) -> None:
        """`put_blob` for many local files, made durable together as `put_blobs` does."""
        try:
            for sha, path in blobs:
                self.put_blob(sha, Path(path), fsync=False)
        finally:
            if blobs:
                os.sync()  # one flush for the batch; Python has no syncfs(2)

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
            if key.startswith("blob:") and key.removeprefix("blob:") in self.blobs_in_use():
                return False  # a published manifest package is made of it
            with self.index.tx() as db:
                row = db.execute("SELECT path FROM entries WHERE key=?", (key,)).fetchone()
                if row is None:
                    return False
                if self.index.ref_count(db, key):
                    return False
                self.index.delete(db, key)
            self._tombstone(self.root / row["path"])
            if key.startswith("package:"):  # a delta package may have both forms
                name = key.removeprefix("package:")
                self._manifests.pop(name, None)
                for path in (self.package_path(name), self.manifest_path(name),
                             self.root / "packages" / f"{name}.remote"):
                    if path.exists():
                        path.unlink()
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
            name = rel.rsplit("/", 1)[-1]
            if rel.startswith("manifests/"):
                name = name.removesuffix(".json")
            key = f"{kind}:{name}"
            if key not in known:  # published by rename, killed before the index row
                known[key] = Entry(key, kind, "", "", rel, 0, 0.0, 0.0)
                st = (self.root / rel).stat()
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


class _Limited:
    """The next `size` bytes of a stream, as a file for `_copy_in`; short input is an error."""

    def __init__(self, stream: BinaryIO, size: int) -> None:
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


def _copy_in(src: Path | BinaryIO | _Limited, dest: Path, hasher=None, *,  # type: ignore[no-untyped-def]
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
