"""Build the package zip Ray expects, streamed to disk, deflate-compressed where it pays.

Entry set equal to Ray's `create_package`: files and directories with no children on disk,
names relative to the root (working_dir) or under the module's basename (py_modules directory),
Unix modes in `external_attr`. Ray stores entries uncompressed (`ZipFile` with its default
ZIP_STORED, ray/_private/runtime_env/packaging.py); the node reads any zip method, and the URI
hashes the files, not the zip, so the method is ours to choose per member:
- by default every member is stored, as Ray stores it: level-1 deflate costs several times the
  CPU of the hashing and the copy together, more than it saves on a fast link (cold.json:
  "ablation: push with deflate, 1k files/200 MB text" and its siblings);
- `compress=True` deflates (level 1) what shrinks (the first block of a file is compressed as a
  probe) and stores what does not (random or already-compressed data): push and watch ask for
  it when the stored package would not fit the target's upload limit (`fits_stored`: Ray's
  100 MiB through the dashboard, 512 MiB to the GCS), where it turns a refusal into a push.
Each file is read once: Ray's digest,
sha256, crc32 and deflate come from the same bytes (the digests only where the caller or the
digest cache does not have them: HASH_ONCE), in batches of small files. Forked workers write each
batch's members (local header and data, as zipfile would) into a batch file that the main thread
copies into the zip with one `copy_file_range` (no payload crosses a pipe); threads handing the
bytes back in memory cost less CPU but lose time on very many small files, so stored members go
to threads unless the package has that many (`stored_by_forks`).
Either way only the main thread writes the zip (workers writing into it in place contend for
the file's lock: more CPU on many small files, as branch `build` measured) and keeps the
central directory; members of the source's previous build whose file stat is unchanged are
copied raw (zipreuse). A file whose
stat changed while we packaged it forces a rebuild, so no zip is ever published under a URI
that does not match its content.

`layout="remote"` wraps everything in one extra top-level directory: Ray strips a single
top-level directory from remote (`file://`, `https://`) zips, and only from those.

This is rtenv's one zip writer: `rtenv push` and `rtenv run` (through `build_scan`), `push
--watch` (watch/zipcache.py, from its snapshot) and the store's assembly of a delta package (from
its blobs, store/zips.py) all write through `write_package_zip`, so the same tree gives the same
bytes whichever route published it. Members are in relpath order (Ray's order is the directory
listing's, which no other route can reproduce; Ray reads any order), dated with the file's
local mtime as Ray dates them.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
import zlib
from collections.abc import Callable, Collection, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, NamedTuple

from rtenv_cli.core.errors import PackagingError
from rtenv_cli.core.packaging import zipreuse
from rtenv_cli.core.packaging.hashing import (
    EMPTY_ACC,
    digest_entries,
    entry_digest,
    file_source_kind,
    fold,
    package_uri,
    scan_uri,
    uri_for_acc,
)
from rtenv_cli.core.packaging.ignore import Kind
from rtenv_cli.core.packaging.pool import forks, workers_for
from rtenv_cli.core.packaging.walk import Entry, PackageScan, scan_package
from rtenv_cli.core.packaging.zipreuse import PreviousZip, ZipAppender

_SAMPLE = 8 * 1024  # enough to tell random/packed data from text


if sys.version_info >= (3, 11):
    def _raw_deflate(data: bytes) -> bytes:
        """Level-1 raw deflate (no zlib header), as zip members hold it."""
        return zlib.compress(data, 1, -15)
else:  # zlib.compress takes wbits only from Python 3.11: the same stream, made in two calls
    def _raw_deflate(data: bytes) -> bytes:
        """Level-1 raw deflate (no zlib header), as zip members hold it."""
        comp = zlib.compressobj(1, zlib.DEFLATED, -15)
        return comp.compress(data) + comp.flush()
_MIN_DEFLATE = 512  # tiny files: deflate (headers dominate anyway; text compresses)
# With compress=True, a file is deflated only when its first block shrinks below this fraction
# (else it is stored, as random or already-compressed data is)
DEFLATE_RATIO = 0.9
_RETRIES = 3


@dataclass(frozen=True)
class BuiltPackage:
    uri: str  # Ray's gcs:// URI for the source
    path: Path  # the zip (or, for a .whl / local archive, the file itself)
    file_count: int
    total_bytes: int
    zip_bytes: int
    scan: PackageScan | None = None
    sha256: Mapping[str, str] = field(default_factory=dict)  # relpath -> content sha256
    layout: str = "ray"
    reused: int = 0  # members copied raw from the previous build of this source
    compressed: bool = False  # built with compress=True (what shrinks is deflated)

    @property
    def hashed_dirs(self) -> tuple[str, ...]:
        """What Ray hashes but this zip cannot show (`hashed_not_zipped`): a store that
        verifies the package against its URI needs it."""
        if self.scan is None or self.scan.single_file:
            return ()
        return hashed_not_zipped(self.scan.entries)

    def to_dict(self) -> dict[str, Any]:
        return {"uri": self.uri, "path": str(self.path), "file_count": self.file_count,
                "total_bytes": self.total_bytes, "zip_bytes": self.zip_bytes}


DateTime = tuple[int, int, int, int, int, int]
ZIP_EPOCH: DateTime = (1980, 1, 1, 0, 0, 0)


def zip_time(mtime_ns: int) -> DateTime:
    """A member's date_time as Ray's `ZipFile.write` sets it: the local mtime, clamped."""
    t = time.localtime(mtime_ns / 1e9)
    if t.tm_year < ZIP_EPOCH[0]:
        return ZIP_EPOCH
    return (t.tm_year, t.tm_mon, t.tm_mday, t.tm_hour, t.tm_min, t.tm_sec)


def _compressible(path: str, size: int) -> bool:
    if size < _MIN_DEFLATE:
        return True
    with open(path, "rb") as fh:
        sample = fh.read(_SAMPLE)
    return len(zlib.compress(sample, 1)) < DEFLATE_RATIO * len(sample)


def hashed_not_zipped(entries: Iterable[Entry]) -> tuple[str, ...]:
    """Paths Ray hashes by name whose names its zip does not show: directories whose children on
    disk are all excluded (a `/data/` in .gitignore, `excludes: [tests/]`), with no zipped entry
    below them, and broken symlinks or sockets. A zip verified against its URI needs them
    (`rayhash.verify_package(extra_dirs=...)`); the root is always hashed and never listed."""
    entries = list(entries)
    shown: set[str] = set()  # directories with a zipped entry below them
    for e in entries:
        if e.in_zip:
            parent = e.relpath
            while "/" in parent:  # up to the first ancestor already seen: O(entries) in all
                parent = parent.rsplit("/", 1)[0]
                if parent in shown:
                    break
                shown.add(parent)
    return tuple(sorted(e.relpath for e in entries
                        if not e.in_zip and e.relpath != "." and e.relpath not in shown))


def is_empty_dir(path: str | Path) -> bool:
    """Whether a directory has no children on disk: Ray zips such a directory, not others."""
    with os.scandir(path) as it:
        return next(it, None) is None


def arcname(e: Entry, scan: PackageScan, prefix: str) -> str:
    if scan.single_file:
        name = e.relpath
    elif scan.kind == "py_module":
        name = scan.root.name if e.relpath == "." else f"{scan.root.name}/{e.relpath}"
    else:
        name = e.relpath  # the root itself only appears when it is empty: "./", like Ray
    name = f"{prefix}/{name}" if prefix else name
    return name + "/" if e.is_dir else name


_CHUNK = 1 << 20  # a large file's reads
_SMALL = 8 << 20  # files up to this size are read and compressed whole by the workers
# zipfile refuses a member over 2 GiB - 1 (compressed or not) unless its local header was written
# with zip64 sizes; deflate can grow incompressible data a little, so decide with a margin
_FORCE_ZIP64 = 1 << 30
_WINDOW = 48 << 20  # bytes in flight between the workers and the writer (bounds disk use)


class _Prepared(NamedTuple):
    crc: int
    method: int
    payload: bytes
    changed: bool
    digest: bytes  # sha1(relpath + content), Ray's entry digest
    sha256: str


def _prepare(e: Entry, compress: bool, digest: bool = True) -> _Prepared:
    """A small file read once, in a worker (packaging/pool.py): Ray's digest and sha256 (unless
    the caller knows them: `digest=False` gives empty ones), crc32 and the payload; the writer
    only copies finished payloads into the zip."""
    import hashlib
    import zipfile

    try:
        with open(e.fspath, "rb") as fh:
            data = fh.read()
            st = os.fstat(fh.fileno())
    except OSError as exc:
        raise PackagingError(f"cannot read {e.fspath}: {exc.strerror}", path=e.fspath,
                             hint="fix its permissions or exclude it") from exc
    changed = (st.st_size, st.st_mtime_ns) != (e.size, e.mtime_ns) or len(data) != e.size
    ray_digest, sha256 = b"", ""
    if digest:
        sha1 = hashlib.sha1(e.relpath.encode())  # noqa: S324 - Ray's content hash scheme
        sha1.update(data)
        ray_digest, sha256 = sha1.digest(), hashlib.sha256(data).hexdigest()
    crc = zlib.crc32(data)
    # a file no bigger than the sample is its own probe: compress it once and compare
    if compress and (len(data) <= _SAMPLE
                     or len(_raw_deflate(data[:_SAMPLE])) < DEFLATE_RATIO * _SAMPLE):
        comp = _raw_deflate(data)
        if len(comp) < len(data):
            return _Prepared(crc, zipfile.ZIP_DEFLATED, comp, changed, ray_digest, sha256)
    return _Prepared(crc, zipfile.ZIP_STORED, data, changed, ray_digest, sha256)


def _info(e: Entry, scan: PackageScan, prefix: str,
          times: Mapping[str, DateTime] | None = None) -> Any:
    import zipfile

    when = times.get(e.relpath) if times is not None else None
    info = zipfile.ZipInfo(arcname(e, scan, prefix), when or zip_time(e.mtime_ns))
    info.create_system = 3
    info.external_attr = (e.mode & 0xFFFF) << 16
    if e.is_dir:
        info.external_attr |= 0x10
    return info


def _stream(zf: Any, info: Any, e: Entry, compress: bool,
            digest: bool = True) -> tuple[bool, bytes, str]:
    """A large file, streamed in chunks and hashed on the way (unless `digest=False`: the
    caller knows its digests); (changed meanwhile, Ray digest, sha256)."""
    import hashlib
    import zipfile

    deflate = compress and _compressible(e.fspath, e.size)
    info.compress_type = zipfile.ZIP_DEFLATED if deflate else zipfile.ZIP_STORED
    ZipAppender.set_level(info, 1)
    hashes = (hashlib.sha1(e.relpath.encode()),  # noqa: S324 - Ray's content hash scheme
              hashlib.sha256()) if digest else ()
    try:
        with open(e.fspath, "rb") as src, zf.open(
                info, "w", force_zip64=e.size > _FORCE_ZIP64) as dst:
            while chunk := src.read(_CHUNK):
                for h in hashes:
                    h.update(chunk)
                dst.write(chunk)
        s = os.stat(e.fspath)
    except OSError as exc:
        raise PackagingError(f"cannot read {e.fspath}: {exc.strerror}",
                             path=e.fspath) from exc
    changed = (s.st_size, s.st_mtime_ns) != (e.size, e.mtime_ns)
    return (changed, hashes[0].digest(), hashes[1].hexdigest()) if hashes else (changed, b"", "")


def _stat_key(e: Entry) -> tuple[int, int, int, int]:
    return (e.size, e.mtime_ns, e.ino, e.mode)


@dataclass
class ZipPass:
    """What writing a package zip found: see `write_package_zip`."""

    changed: list[Entry] = field(default_factory=list)  # stat changed while being written
    reused: int = 0  # members copied raw from the previous build
    digests: dict[str, tuple[bytes, str]] = field(default_factory=dict)  # of the files read
    stats: dict[str, Any] | None = None  # member -> its reuse key (the file stat), if known
    spliced: zipreuse.Spliced | None = None  # how a splice wrote it (size, index)


# (scratch file or None, its size, the members' bytes when in memory, per file: its ZipInfo,
# offset, changed, Ray digest, sha256): see _prepare_batch
_Batch = tuple[str | None, int, list[bytes], list[tuple[Any, int, bool, bytes, str]]]
_Item = tuple[Entry, Any, bool]  # an entry, its ZipInfo, whether to hash its file

# Stored members (no deflate) are prepared by threads that hand back their bytes in memory (a
# read, crc32 and the hashes release the GIL): that costs less CPU than forked workers (no fork,
# no pickled results, no scratch file written and copied again) on every shape, which is what
# counts on a busy box (cold.json: "ablation: hash+zip, stored members by forked workers, 1k
# files/200 MB text", and the 10k-file rows). Only on very many small files, where the per-file
# Python work that holds the GIL dominates, do forked workers (each with its own GIL) win on wall
# time: on a calm box (50k files/200 MB text, commit 1a12760) and in most loaded runs (cold.json:
# "ablation: hash+zip, stored members by threads, 50k files/200 MB random"), though not in all
# (the same row for text: their extra CPU lost where both cores were busy).
STORED_FORK_MIN_FILES = 20_000
# the ablation switch: "auto" (by the count above), or always "threads" / always "forks"
STORED_WORKERS: Literal["auto", "threads", "forks"] = "auto"


def stored_by_forks(small_files: int) -> bool:
    """Whether a stored package's `small_files` are prepared by forked workers (else threads):
    see STORED_FORK_MIN_FILES."""
    if STORED_WORKERS != "auto":
        return STORED_WORKERS == "forks"
    return small_files >= STORED_FORK_MIN_FILES


def _prepare_batch(items: Sequence[_Item], scratch: str | None, compress: bool) -> _Batch:
    """Prepare a batch of small files (in a worker) and make their members, local header and
    data as zipfile would, one after the other: into the file `scratch` in a forked worker
    (the writer then moves the batch into the zip with one `copy_file_range` instead of
    receiving every payload through a pipe), or in memory (`scratch` None, in a thread).
    Returns `scratch`, the batch's size, the bytes when in memory and, per file, its ZipInfo
    (sizes, crc, method set), its member's offset in the batch, whether it changed while read,
    Ray's digest and the sha256 (empty when the item says not to hash)."""
    out: list[tuple[Any, int, bool, bytes, str]] = []
    bufs: list[bytes] = []
    at = 0
    with open(scratch, "wb", buffering=1 << 20) if scratch is not None else \
            contextlib.nullcontext() as fh:
        for e, info, digest in items:
            done = _prepare(e, compress) if digest else _prepare(e, compress, digest=False)
            info.compress_type = done.method
            info.file_size = e.size
            info.compress_size = len(done.payload)
            info.CRC = done.crc
            header = ZipAppender.local_header(info)
            if fh is not None:
                fh.write(header)
                fh.write(done.payload)
            else:
                bufs += (header, done.payload)
            out.append((info, at, done.changed, done.digest, done.sha256))
            at += len(header) + len(done.payload)
    return scratch, at, bufs, out


_BATCH_BYTES = 1 << 20  # small files travel to a worker process in batches of about this much
_BATCH_FILES = 128


def _in_zip(entries: Iterable[Entry]) -> list[Entry]:
    """The entries that get a member, in member order (relpath order: see the module doc)."""
    return sorted((e for e in entries if e.in_zip), key=lambda e: e.relpath)


def _write_zip(scan: PackageScan, out: Path, prefix: str,  # noqa: PLR0917 - internal
               on_progress: Callable[[int], None] | None,
               entries: Sequence[Entry] | None = None,
               times: Mapping[str, DateTime] | None = None, *,
               processes: bool = True, compress: bool = False,
               known: Collection[str] = frozenset()) -> ZipPass:
    """Write the zip of `entries` (default: every entry of the scan that goes in the zip),
    hashing every file it reads on the same read, except those whose digests the caller has
    (`known` relpaths). Small files are prepared (read, hashed, deflated with `compress`) in
    worker batches; the writer appends them in order.
    """
    import zipfile

    plan = [(e, _info(e, scan, prefix, times), e.relpath not in known)
            for e in _in_zip(entries if entries is not None else scan.entries)]
    small = sum(1 for e, _i, _d in plan if not e.is_dir and e.size <= _SMALL)
    forked = processes and (compress or stored_by_forks(small))
    scratch = f"{out}.batch" if forks(small, forked) else None  # what workers_for gives
    writer = None
    try:
        with open(out, "w+b", buffering=1 << 20) as fh, \
                zipfile.ZipFile(fh, "w", allowZip64=True) as zf, \
                workers_for(small, forked) as pool:
            writer = _MemberWriter(zf, pool, scratch, on_progress, compress)
            for e, info, digest in plan:
                writer.add(e, info, digest)
            writer.finish()
    finally:
        if writer is not None:
            writer.remove_scratches()
    return writer.result


class _MemberWriter:
    """Appends members to `zf` in the order they are added: small files go to worker batches
    (a batch is flushed when full, or before anything written in order), directories and
    large files are written here; finished work is drained in order, and the bytes of small
    files in flight are bounded by _WINDOW."""

    def __init__(self, zf: Any, pool: Any, scratch_prefix: str | None,
                 on_progress: Callable[[int], None] | None, compress: bool) -> None:
        from collections import deque

        self.compress = compress
        self.zf, self.pool, self.on_progress = zf, pool, on_progress
        self.scratch_prefix = scratch_prefix
        self.result = ZipPass()
        # (entries with their ZipInfo, future of a worker batch (a Future, or pool.Done when
        # inline) | None for in-order work)
        self.pending: deque[tuple[list[_Item], Any]] = deque()
        self.in_flight = 0
        self.batch: list[_Item] = []
        self.batch_bytes = 0
        self.scratches: list[str] = []

    def add(self, e: Entry, info: Any, digest: bool = True) -> None:
        if not e.is_dir and e.size <= _SMALL:
            self.batch.append((e, info, digest))
            self.batch_bytes += e.size
            self.in_flight += e.size
            if self.batch_bytes >= _BATCH_BYTES or len(self.batch) >= _BATCH_FILES:
                self._flush_batch()
        else:
            self._flush_batch()  # keep the zip in scan order
            self.pending.append(([(e, info, digest)], None))
        self._drain(_WINDOW)

    def finish(self) -> None:
        self._flush_batch()
        self._drain(-1)

    def remove_scratches(self) -> None:
        """What a failure left (each scratch file is removed once copied)."""
        for scratch in self.scratches:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(scratch)

    def _flush_batch(self) -> None:
        if self.batch:
            scratch = None
            if self.scratch_prefix is not None:
                scratch = f"{self.scratch_prefix}{len(self.scratches)}"
                self.scratches.append(scratch)
            self.pending.append((self.batch, self.pool.submit(_prepare_batch, self.batch,
                                                              scratch, self.compress)))
            self.batch, self.batch_bytes = [], 0

    def _drain(self, limit: int) -> None:
        pending = self.pending
        while pending and (self.in_flight > limit or pending[0][1] is None
                           or pending[0][1].done()):
            items, fut = pending.popleft()
            if fut is None:  # a directory or a large file: written in order, here
                e, info, hash_it = items[0]
                if e.is_dir:
                    self.zf.writestr(info, b"")
                    continue
                self._record(e, *_stream(self.zf, info, e, self.compress, hash_it), hash_it)
            else:
                self.in_flight -= sum(e.size for e, _i, _d in items)
                self._write_batch(items, fut.result())
            if self.on_progress:
                self.on_progress(sum(e.size for e, _info, _d in items if not e.is_dir))

    def _write_batch(self, items: list[_Item], batch_done: _Batch) -> None:
        """Append a worker's batch: its members' bytes (one copy from its scratch file, or
        its buffers), their infos for the central directory."""
        scratch, size, bufs, prepared = batch_done
        members = [(info, at) for info, at, *_r in prepared]
        if scratch is None:
            ZipAppender(self.zf).append_buffers(bufs, members)
        else:
            fd = os.open(scratch, os.O_RDONLY)
            try:
                ZipAppender(self.zf).append_members(fd, size, members)
            finally:
                os.close(fd)
                os.unlink(scratch)
        for (e, _info, hashed), (_i, _at, changed, digest, sha) in zip(items, prepared,
                                                                       strict=True):
            self._record(e, changed, digest, sha, hashed)

    def _record(self, e: Entry, changed: bool, digest: bytes, sha: str,
                hashed: bool = True) -> None:
        if hashed:
            self.result.digests[e.relpath] = (digest, sha)
        if changed:
            self.result.changed.append(e)


def _rebuild(scan: PackageScan, out: Path, prefix: str,  # noqa: PLR0917 - internal
             on_progress: Callable[[int], None] | None, previous: PreviousZip,
             times: Mapping[str, DateTime] | None = None,
             key: Callable[[Entry], Hashable] | None = None, processes: bool = True,
             compress: bool = False, known: Collection[str] = frozenset()) -> ZipPass:
    """Write the zip reusing `previous` (the last build of this source): only the files whose
    `key` (default: their stat) changed are read and compressed, into a zip of their own;
    `zipreuse.splice` then assembles both in member order.
    Unspliceable (zip64) propagates: the caller builds afresh."""
    key = key or _stat_key
    parts: list[tuple[str, bool]] = []  # (member name, from the previous zip)
    fresh: list[Entry] = []
    reused_bytes = 0
    stats: dict[str, Any] = {}  # what `remember` files for next time
    for e in _in_zip(scan.entries):
        name = arcname(e, scan, prefix)
        old = False
        if not e.is_dir:
            k = stats[name] = key(e)
            old = previous.reusable(name, k)
        parts.append((name, old))
        if old:
            reused_bytes += e.size
        else:
            fresh.append(e)
    result, spliced = zipreuse.splice_changed(
        out, previous.index, parts,
        lambda part: _write_zip(scan, part, prefix, on_progress, fresh, times,
                                processes=processes, compress=compress, known=known))
    if on_progress and reused_bytes:
        on_progress(reused_bytes)
    result.reused = len(parts) - len(fresh)
    result.stats = stats
    result.spliced = spliced
    return result


def write_package_zip(scan: PackageScan, out: Path, *,
                      layout: Literal["ray", "remote"] = "ray",
                      times: Mapping[str, DateTime] | None = None,
                      previous: PreviousZip | None = None,
                      key: Callable[[Entry], Hashable] | None = None,
                      processes: bool = True, compress: bool = False,
                      on_progress: Callable[[int], None] | None = None,
                      known: Collection[str] = frozenset()) -> ZipPass:
    """Write the package zip of `scan`'s entries to `out`: rtenv's one zip writer (module doc).

    `times`: relpath -> date_time for entries whose file is not the one they stand for (the
    store writes blobs; the client's local mtime travels with the manifest); others are dated
    by their mtime. `previous`: an earlier zip of the same source to take unchanged members
    from (by `key`, default the file stat), spliced (see `zipreuse.splice`); one that cannot
    splice is ignored. Files whose stat changed while
    read are in the result's `changed` (the caller must not publish); `digests` holds Ray's
    digest and the sha256 of every file read; `stats` each file member's `key`.
    `processes=False`: worker threads only, never forked processes (a server's threads may
    hold locks a forked child would wait on forever); the bytes are the same.
    `compress`: deflate what shrinks (module doc); else every member is stored. `previous`
    must have been written with the same choice (its members are copied as they are).
    `known`: relpaths whose digests the caller has: their files are read for their members
    but not hashed again (they are not in `digests`).
    """
    prefix = "pkg" if layout == "remote" else ""
    if previous is not None:
        with contextlib.suppress(zipreuse.Unspliceable):
            return _rebuild(scan, out, prefix, on_progress, previous, times, key, processes,
                            compress, known)
    result = _write_zip(scan, out, prefix, on_progress, None, times, processes=processes,
                        compress=compress, known=known)
    result.stats = {arcname(e, scan, prefix): (key or _stat_key)(e)
                    for e in scan.entries if e.in_zip and not e.is_dir}
    return result


_LOCAL_HEADER, _CENTRAL_HEADER, _END = 30, 46, 22  # fixed parts of a zip's records
_ZIP64_EXTRA = 28  # the most a member's zip64 fields add, local and central together


def stored_size(scan: PackageScan, layout: Literal["ray", "remote"] = "ray") -> int:
    """The bytes of `scan`'s zip with every member stored, from its entries alone (an upper
    bound: zip64 fields counted for every member that may need them)."""
    prefix = "pkg" if layout == "remote" else ""
    total = _END + 2 * _ZIP64_EXTRA
    for e in _in_zip(scan.entries):
        name = len(arcname(e, scan, prefix).encode())
        total += _LOCAL_HEADER + _CENTRAL_HEADER + 2 * name + (0 if e.is_dir else e.size)
        if e.size > _FORCE_ZIP64:
            total += _ZIP64_EXTRA
    return total


def fits_stored(scan: PackageScan, layout: Literal["ray", "remote"],
                limit: int | None) -> bool | None:
    """Whether `scan` stored fits a target's upload `limit` (None: the target has none). Push
    and watch deflate only a package that would not (see the module doc): both decide from the
    entries, so both write the same bytes."""
    return None if limit is None else stored_size(scan, layout) <= limit


def _zip_pass(scan: PackageScan, tmp: Path, prefix: str,  # noqa: PLR0917 - internal
              on_progress: Callable[[int], None] | None, slot: str | None,
              compress: bool, known: Collection[str] = frozenset()) -> ZipPass:
    """Write `tmp`: spliced with the last build of (root, `slot`) when there is one and it
    splices, else from scratch. Nothing is left behind on failure."""
    previous = None
    try:
        previous = zipreuse.open_previous(scan.root, slot) if slot is not None else None
        return write_package_zip(scan, tmp, layout="remote" if prefix else "ray",
                                 previous=previous, on_progress=on_progress, compress=compress,
                                 known=known if HASH_ONCE else frozenset())
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    finally:
        if previous is not None:
            previous.close()


# Files whose digests build_scan is given (push hashed the tree to ask the target for its URI
# first) or finds in the digest cache are read for their members, not hashed again. False: the
# zip pass hashes every file it reads, for the ablation rows, e.g.
# cold.json: "ablation: push hashing twice, 10k files/200 MB random". (Hashing in the zip pass
# instead, one read per file and no hashing pass, did not pay: push's URI check first stays.)
HASH_ONCE = True


def _cached_digests(scan: PackageScan, use_cache: bool) -> dict[str, tuple[bytes, str | None]]:
    """Digests known without reading a file: directories and specials (name only) and the
    digest cache's hits."""
    out: dict[str, tuple[bytes, str | None]] = {
        e.relpath: (entry_digest(e.relpath, None, True), None)
        for e in scan.entries if e.is_dir or e.special}
    if use_cache:
        from rtenv_cli.core.packaging.digest_cache import DigestCache

        cache = DigestCache.open_default()
        try:
            out.update(cache.lookup([e for e in scan.entries if not (e.is_dir or e.special)]))
        finally:
            cache.close()
    return out


def build_scan(scan: PackageScan, *, dest_dir: Path, layout: Literal["ray", "remote"] = "ray",
               use_cache: bool = True, on_progress: Callable[[int], None] | None = None,
               digests: Mapping[str, tuple[bytes, str | None]] | None = None,
               compress: bool = False) -> BuiltPackage:
    """Zip one scanned package, hashing each file on the same read (see the module doc);
    digests the cache or the caller (`digests`, from `digest_entries` of the same scan) already
    know are taken as they are. `compress`: deflate what shrinks (else all stored, as Ray)."""
    dest_dir.mkdir(parents=True, exist_ok=True)
    slot = f"{scan.kind}:{layout}" + (":deflate" if compress else "")
    known = dict(digests) if digests is not None else _cached_digests(scan, use_cache)
    tmp = dest_dir / f"._pending.{os.getpid()}.{time.monotonic_ns()}.tmp"
    prefix = "pkg" if layout == "remote" else ""  # a fixed top dir: Ray strips it again
    zip_pass = _zip_pass(scan, tmp, prefix, on_progress, slot if use_cache else None, compress,
                         known)
    spliced = zip_pass.spliced
    if zip_pass.changed:
        tmp.unlink(missing_ok=True)
        names = ", ".join(e.relpath for e in zip_pass.changed[:5])
        raise _Changed(names)
    fresh = {rel: d for rel, d in zip_pass.digests.items() if rel not in known}
    digests = {**known, **zip_pass.digests}
    lacking = [e for e in scan.entries if e.relpath not in digests]
    if lacking:  # reused members the digest cache no longer knows (it was cleared)
        digests.update(digest_entries(lacking, use_cache=False))
    if use_cache and fresh:
        from rtenv_cli.core.packaging.digest_cache import DigestCache

        by_rel = {e.relpath: e for e in scan.entries}
        cache = DigestCache.open_default()
        try:
            cache.store([(by_rel[rel], d, sha) for rel, (d, sha) in fresh.items()],
                        keep=scan.entries)
        finally:
            cache.close()
    if scan.single_file:
        e = scan.entries[0]
        uri = uri_for_acc(fold(EMPTY_ACC, digests[e.relpath][0]))
    else:
        uri = scan_uri(scan, digests)
    name = uri.removeprefix("gcs://")
    final = dest_dir / (name if layout == "ray" else f"remote{name}")
    os.replace(tmp, final)
    if use_cache:
        zipreuse.remember(scan.root, slot, final, zip_pass.stats or {},
                          spliced.known if spliced is not None else None)
    sha = {rel: s for rel, (_d, s) in digests.items() if s is not None}
    size = spliced.size if spliced is not None else final.stat().st_size
    return BuiltPackage(uri, final, scan.file_count, scan.total_bytes, size, scan, sha, layout,
                        zip_pass.reused, compress)


class _Changed(Exception):
    pass


def build_package(source: Path, *, kind: Kind, excludes: Sequence[str] = (),
                  env: Mapping[str, str] | None = None, dest_dir: Path | None = None,
                  layout: Literal["ray", "remote"] = "ray", use_cache: bool = True,
                  on_progress: Callable[[int], None] | None = None,
                  compress: bool = False) -> BuiltPackage:
    """Ray's URI and a zip with Ray's entries for a local working_dir / py_modules source."""
    from rtenv_cli.core.paths import rtenv_home

    source = Path(source).absolute()
    dest_dir = Path(dest_dir) if dest_dir is not None else rtenv_home() / "build"
    if source.is_file():
        what = file_source_kind(source, kind)
        if what in ("whl", "archive"):
            size = source.stat().st_size
            return BuiltPackage(package_uri(source, kind=kind), source, 1, size, size)
    last = ""
    for _ in range(_RETRIES):
        scan = scan_package(source, kind=kind, excludes=excludes, env=env)
        if scan.root_excluded:
            rule = "an ignore rule"
            raise PackagingError(
                f"{source}: the whole {kind} is excluded ({rule} matches the root itself, "
                "e.g. `*` or `.*`), so Ray would publish the empty package "
                "gcs://_ray_pkg_3030303030303030.zip", path=str(source),
                hint="`*` and `.*` match the root's own path \".\" in Ray: use `/*` with "
                "negations, or narrower patterns; see `rtenv check-ignore -v .`")
        try:
            return build_scan(scan, dest_dir=dest_dir, layout=layout, use_cache=use_cache,
                              on_progress=on_progress, compress=compress)
        except _Changed as exc:
            last = str(exc)
    raise PackagingError(f"files kept changing while {source} was packaged: {last}",
                         hint="stop the process writing them, or exclude them", path=str(source))


__all__ = ["BuiltPackage", "build_package", "build_scan", "entry_digest", "fits_stored",
           "hashed_not_zipped", "stored_by_forks", "stored_size", "write_package_zip",
           "zip_time"]
