"""Build the package zip Ray expects, streamed to disk, deflate-compressed where it pays.

Entry set equal to Ray's `create_package`: files and directories with no children on disk,
names relative to the root (working_dir) or under the module's basename (py_modules directory),
Unix modes in `external_attr`. Ray stores entries uncompressed; the node reads any zip method,
so we deflate (level 1) what compresses and store what does not (random/packed data), which
keeps more under the 100 MiB upload limit for little CPU. Hashing runs in worker threads while
the main thread writes the zip; a file whose stat changed while we packaged it forces a rebuild,
so no zip is ever published under a URI that does not match its content.

`layout="remote"` wraps everything in one extra top-level directory: Ray strips a single
top-level directory from remote (`file://`, `https://`) zips, and only from those.
"""

from __future__ import annotations

import os
import time
import zlib
from collections.abc import Callable, Mapping, Sequence
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
from rtenv_cli.core.packaging.walk import Entry, PackageScan, scan_package
from rtenv_cli.core.packaging.zipreuse import PreviousZip, copy_raw

_SAMPLE = 8 * 1024  # enough to tell random/packed data from text
_MIN_DEFLATE = 512  # tiny files: deflate (headers dominate anyway; text compresses)
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

    def to_dict(self) -> dict[str, Any]:
        return {"uri": self.uri, "path": str(self.path), "file_count": self.file_count,
                "total_bytes": self.total_bytes, "zip_bytes": self.zip_bytes}


def _date_time(mtime_ns: int) -> tuple[int, int, int, int, int, int]:
    t = time.localtime(mtime_ns / 1e9)
    if t.tm_year < 1980:  # noqa: PLR2004 - the zip epoch
        return (1980, 1, 1, 0, 0, 0)
    return (t.tm_year, t.tm_mon, t.tm_mday, t.tm_hour, t.tm_min, t.tm_sec)


def _compressible(path: str, size: int) -> bool:
    if size < _MIN_DEFLATE:
        return True
    with open(path, "rb") as fh:
        sample = fh.read(_SAMPLE)
    return len(zlib.compress(sample, 1)) < 0.9 * len(sample)


def arcname(e: Entry, scan: PackageScan, prefix: str) -> str:
    if scan.single_file:
        name = e.relpath
    elif scan.kind == "py_module":
        name = scan.root.name if e.relpath == "." else f"{scan.root.name}/{e.relpath}"
    else:
        name = e.relpath  # the root itself only appears when it is empty: "./", like Ray
    name = f"{prefix}/{name}" if prefix else name
    return name + "/" if e.is_dir else name


_SMALL = 8 << 20  # files up to this size are compressed whole in worker threads
_WINDOW = 48 << 20  # bytes in flight between the workers and the writer (bounds RSS)


def _prepare(e: Entry) -> tuple[int, int, bytes, bool]:
    """(crc32, zip method, payload, changed) for a small file, in a worker thread.

    zlib and file reads release the GIL, so two cores compress at once; the writer thread only
    copies finished payloads into the zip.
    """
    import zipfile

    try:
        with open(e.fspath, "rb") as fh:
            data = fh.read()
            st = os.fstat(fh.fileno())
    except OSError as exc:
        raise PackagingError(f"cannot read {e.fspath}: {exc.strerror}", path=e.fspath,
                             hint="fix its permissions or exclude it") from exc
    changed = (st.st_size, st.st_mtime_ns) != (e.size, e.mtime_ns) or len(data) != e.size
    crc = zlib.crc32(data)
    sample = data[:_SAMPLE]
    if len(data) < _MIN_DEFLATE or len(zlib.compress(sample, 1)) < 0.9 * len(sample):
        co = zlib.compressobj(1, zlib.DEFLATED, -15)
        comp = co.compress(data) + co.flush()
        if len(comp) < len(data):
            return crc, zipfile.ZIP_DEFLATED, comp, changed
    return crc, zipfile.ZIP_STORED, data, changed


def _info(e: Entry, scan: PackageScan, prefix: str) -> Any:
    import zipfile

    info = zipfile.ZipInfo(arcname(e, scan, prefix), _date_time(e.mtime_ns))
    info.create_system = 3
    info.external_attr = (e.mode & 0xFFFF) << 16
    if e.is_dir:
        info.external_attr |= 0x10
    return info


def _put_raw(  # noqa: PLR0917 - internal, one call site
        zf: Any, info: Any, crc: int, method: int, payload: bytes, size: int) -> None:
    """Append a member whose compressed bytes are ready (zipfile has no public API for it)."""
    info.compress_type = method
    info.file_size = size
    info.compress_size = len(payload)
    info.CRC = crc
    info.header_offset = zf.fp.tell()
    zf.fp.write(info.FileHeader(False))
    zf.fp.write(payload)
    zf.filelist.append(info)
    zf.NameToInfo[info.filename] = info
    zf.start_dir = zf.fp.tell()
    zf._didModify = True


def _stream(zf: Any, info: Any, e: Entry) -> bool:
    """A large file, streamed in chunks; returns whether it changed meanwhile."""
    import zipfile

    deflate = _compressible(e.fspath, e.size)
    info.compress_type = zipfile.ZIP_DEFLATED if deflate else zipfile.ZIP_STORED
    info._compresslevel = 1
    try:
        with open(e.fspath, "rb") as src, zf.open(
                info, "w", force_zip64=e.size > 2**31) as dst:
            while chunk := src.read(1 << 20):
                dst.write(chunk)
        s = os.stat(e.fspath)
    except OSError as exc:
        raise PackagingError(f"cannot read {e.fspath}: {exc.strerror}",
                             path=e.fspath) from exc
    return (s.st_size, s.st_mtime_ns) != (e.size, e.mtime_ns)


class _Raw(NamedTuple):
    info: Any  # the previous zip's ZipInfo of an unchanged file


def _stat_key(e: Entry) -> tuple[int, int, int, int]:
    return (e.size, e.mtime_ns, e.ino, e.mode)


def _write_zip(scan: PackageScan, out: Path, prefix: str,
               on_progress: Callable[[int], None] | None,
               previous: PreviousZip | None = None) -> tuple[list[Entry], int]:
    """Write the zip; return the entries whose stat changed while being written, and how many
    members were reused.

    Members of `previous` (the last build of this source) whose file stat is unchanged are
    copied raw, neither read from the tree nor compressed again.
    """
    import zipfile
    from collections import deque
    from concurrent.futures import Future, ThreadPoolExecutor

    changed: list[Entry] = []
    reused = 0
    pending: deque[tuple[Entry, Any, Future[tuple[int, int, bytes, bool]] | _Raw | None]] = \
        deque()
    in_flight = 0

    def drain(zf: Any, limit: int) -> None:
        nonlocal in_flight, reused
        while pending and (in_flight > limit or not isinstance(pending[0][2], Future)
                           or pending[0][2].done()):
            e, info, fut = pending.popleft()
            if isinstance(fut, _Raw):  # a member of the previous zip
                copy_raw(zf, previous.zf.fp, fut.info, info.filename)  # type: ignore[union-attr]
                reused += 1
            elif fut is None:  # a directory or a large file: written in order, here
                if e.is_dir:
                    zf.writestr(info, b"")
                    continue
                if _stream(zf, info, e):
                    changed.append(e)
            else:
                crc, method, payload, was_changed = fut.result()
                in_flight -= e.size
                _put_raw(zf, info, crc, method, payload, e.size)
                if was_changed:
                    changed.append(e)
            if on_progress and not e.is_dir:
                on_progress(e.size)

    with zipfile.ZipFile(out, "w", allowZip64=True) as zf, \
            ThreadPoolExecutor(max(2, os.cpu_count() or 2)) as pool:
        for e in scan.entries:
            if not e.in_zip:
                continue
            info = _info(e, scan, prefix)
            raw = (previous.member(info.filename, _stat_key(e))
                   if previous is not None and not e.is_dir else None)
            if raw is not None:
                pending.append((e, info, _Raw(raw)))
            elif e.is_dir or e.size > _SMALL:
                pending.append((e, info, None))
            else:
                in_flight += e.size
                pending.append((e, info, pool.submit(_prepare, e)))
            drain(zf, _WINDOW)
        drain(zf, -1)
    return changed, reused


def build_scan(scan: PackageScan, *, dest_dir: Path, layout: Literal["ray", "remote"] = "ray",
               use_cache: bool = True, on_progress: Callable[[int], None] | None = None,
               digests: Mapping[str, tuple[bytes, str | None]] | None = None) -> BuiltPackage:
    """Hash (threads) and zip (this thread) one scanned package, concurrently; `digests` from
    the caller's own `digest_entries` of the same scan skip the hashing."""
    from concurrent.futures import ThreadPoolExecutor

    dest_dir.mkdir(parents=True, exist_ok=True)
    slot = f"{scan.kind}:{layout}"
    previous = zipreuse.open_previous(scan.root, slot) if use_cache else None
    with ThreadPoolExecutor(1) as pool:
        fut = (pool.submit(dict, digests) if digests is not None else
               pool.submit(digest_entries, scan.entries, use_cache=use_cache))
        uri_guess = "_pending"
        tmp = dest_dir / f".{uri_guess}.{os.getpid()}.{time.monotonic_ns()}.tmp"
        try:
            prefix = ""
            if layout == "remote":
                prefix = "pkg"  # renamed below is not possible in a zip; a fixed top dir
            changed, reused = _write_zip(scan, tmp, prefix, on_progress, previous)
            digests = fut.result()
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        finally:
            if previous is not None:
                previous.close()
    if changed:
        tmp.unlink(missing_ok=True)
        names = ", ".join(e.relpath for e in changed[:5])
        raise _Changed(names)
    if scan.single_file:
        e = scan.entries[0]
        uri = uri_for_acc(fold(EMPTY_ACC, digests[e.relpath][0]))
    else:
        uri = scan_uri(scan, digests)
    name = uri.removeprefix("gcs://")
    final = dest_dir / (name if layout == "ray" else f"remote{name}")
    os.replace(tmp, final)
    if use_cache:
        zipreuse.remember(scan.root, slot, final, {
            arcname(e, scan, "pkg" if layout == "remote" else ""): _stat_key(e)
            for e in scan.entries if e.in_zip and not e.is_dir})
    sha = {rel: s for rel, (_d, s) in digests.items() if s is not None}
    return BuiltPackage(uri, final, scan.file_count, scan.total_bytes, final.stat().st_size,
                        scan, sha, layout, reused)


class _Changed(Exception):
    pass


def build_package(source: Path, *, kind: Kind, excludes: Sequence[str] = (),
                  env: Mapping[str, str] | None = None, dest_dir: Path | None = None,
                  layout: Literal["ray", "remote"] = "ray", use_cache: bool = True,
                  on_progress: Callable[[int], None] | None = None) -> BuiltPackage:
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
                              on_progress=on_progress)
        except _Changed as exc:
            last = str(exc)
    raise PackagingError(f"files kept changing while {source} was packaged: {last}",
                         hint="stop the process writing them, or exclude them", path=str(source))


__all__ = ["BuiltPackage", "build_package", "build_scan", "entry_digest"]
