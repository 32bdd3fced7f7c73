"""Ray 2.60's package URIs: the XOR-folded SHA-1 over (relative path [+ content]) per entry.

Directory: every kept entry (root "." included) contributes sha1(relpath [+ content]); the
20-byte digests are XORed into eight ASCII '0' bytes and cut to 8 bytes (`fold`). Single .py:
the same for the one file under its name, without ".". Wheels: `gcs://<file name>`. Local
archives: `gcs://_ray_pkg_<sha1 of the bytes><ext>`. Files are hashed in parallel threads
(hashlib releases the GIL) and remembered in the digest cache, so an unchanged tree costs stats.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TypeVar

from rtenv_cli.core.errors import ConfigError, PackagingError
from rtenv_cli.core.packaging.ignore import Kind
from rtenv_cli.core.packaging.walk import Entry, PackageScan, scan_package

EMPTY_ACC = b"00000000"  # Ray's initial accumulator: eight ASCII zeros, not NUL bytes
PREFIX = "gcs://_ray_pkg_"
CHUNK = 1 << 20
ARCHIVE_EXTS = (".zip", ".tar.gz", ".tgz", ".tar.xz")
EMPTY_URI = f"{PREFIX}{EMPTY_ACC.hex()}.zip"  # root excluded: nothing hashed
T = TypeVar("T")


def fold(acc: bytes, digest: bytes) -> bytes:
    return bytes(a ^ b for a, b in zip(acc, digest, strict=False))


def uri_for_acc(acc: bytes) -> str:
    return f"{PREFIX}{acc.hex()}.zip"


def file_digests(relpath: str, path: Path | str) -> tuple[bytes, str]:
    """(sha1(relpath + content) as Ray hashes it, sha256 hex of the content); one read."""
    h = hashlib.sha1(relpath.encode())  # noqa: S324 - Ray's content hash scheme
    h2 = hashlib.sha256()
    try:
        with open(path, "rb") as fh:
            while chunk := fh.read(CHUNK):
                h.update(chunk)
                h2.update(chunk)
    except OSError as exc:
        raise PackagingError(f"cannot read {path}: {exc.strerror}", path=str(path),
                             hint="fix its permissions or exclude it") from exc
    return h.digest(), h2.hexdigest()


def entry_digest(relpath: str, path: Path | None, is_dir: bool) -> bytes:
    """The 20-byte SHA-1 Ray XORs for one entry (path None: name only, e.g. a broken link)."""
    if is_dir or path is None:
        return hashlib.sha1(relpath.encode()).digest()  # noqa: S324 - Ray's scheme
    return file_digests(relpath, path)[0]


def _workers() -> int:
    return max(2, min(8, (os.cpu_count() or 2)))


_INLINE_BYTES = 1 << 20  # less than this to hash (a re-push's few edits): no thread pool
# files go to the threads in batches of about this many bytes (or files): a future per file
# holds the GIL for each, which adds up on many small files (cold.json: "push to the GCS, 50k
# files/200 MB text")
_BATCH_BYTES = 4 << 20
_BATCH_FILES = 256


def _batches(todo: Sequence[Entry]) -> Iterator[list[Entry]]:
    batch: list[Entry] = []
    size = 0
    for e in todo:
        batch.append(e)
        size += e.size
        if size >= _BATCH_BYTES or len(batch) >= _BATCH_FILES:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch


def _map(fn: Callable[[Entry], T], todo: Sequence[Entry]) -> Iterator[T]:
    """`fn` over `todo` in threads (hashlib releases the GIL) in batches, or inline when there
    is little; results in `todo`'s order."""
    if len(todo) == 1 or sum(e.size for e in todo) < _INLINE_BYTES:
        yield from map(fn, todo)
        return
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(_workers()) as pool:
        for done in pool.map(lambda batch: [fn(e) for e in batch], _batches(todo)):
            yield from done


def digest_entries(
    entries: Sequence[Entry], *, use_cache: bool = True,
                   on_progress: Callable[[int], None] | None = None
                   ) -> dict[str, tuple[bytes, str | None]]:
    """relpath -> (Ray entry digest, sha256 of content or None for dirs/specials)."""
    out: dict[str, tuple[bytes, str | None]] = {}
    cache = None
    if use_cache:
        from rtenv_cli.core.packaging.digest_cache import DigestCache

        cache = DigestCache.open_default()
    files = []
    for e in entries:
        if e.is_dir or e.special:
            out[e.relpath] = (entry_digest(e.relpath, None, True), None)
        else:
            files.append(e)
    hit_bytes, todo = 0, files
    if cache is not None:
        hits, todo, hit_bytes = cache.split(files)
        out.update(hits)
    if on_progress and hit_bytes:
        on_progress(hit_bytes)  # once: a bar's advance per cached file costs more than a stat
    if todo:
        def one(e: Entry) -> tuple[Entry, bytes, str]:
            d, s = file_digests(e.relpath, e.fspath)
            return e, d, s

        fresh = []
        for e, d, s in _map(one, todo):
            out[e.relpath] = (d, s)
            fresh.append((e, d, s))
            if on_progress:
                on_progress(e.size)
        if cache is not None:
            cache.store(fresh)
    if cache is not None:
        cache.close()
    return out


def acc_of(digests: Iterable[bytes]) -> bytes:
    """`fold` over many digests, as one integer XOR (same bytes, much faster in Python:
    benchmarks/results/fastpaths.json: "fold 10,000 digests as one integer XOR")."""
    acc = int.from_bytes(EMPTY_ACC, "big")
    for d in digests:
        acc ^= int.from_bytes(d[:8], "big")
    return acc.to_bytes(8, "big")


def scan_uri(scan: PackageScan, digests: Mapping[str, tuple[bytes, str | None]]) -> str:
    return uri_for_acc(acc_of(digests[e.relpath][0] for e in scan.entries))


def archive_uri(path: Path) -> str:
    h = hashlib.sha1()  # noqa: S324 - Ray's archive naming
    with path.open("rb") as fh:
        while chunk := fh.read(CHUNK):
            h.update(chunk)
    name = path.name
    ext = (".tar.gz" if name.endswith((".tar.gz", ".tgz")) else
           ".tar.xz" if name.endswith(".tar.xz") else ".zip")
    return f"{PREFIX}{h.hexdigest()}{ext}"


def file_source_kind(source: Path, kind: Kind) -> str:
    """'py' | 'whl' | 'archive' for a file source, or a ConfigError for what Ray rejects."""
    name = source.name
    if kind == "py_module":
        if name.endswith(".py"):
            return "py"
        if name.endswith(".whl"):
            return "whl"
        raise ConfigError(f"py_modules entry {source} must be a .py file, a directory or a "
                          ".whl file", hint="Ray rejects local archives as py_modules")
    if name.endswith(ARCHIVE_EXTS):
        return "archive"
    raise ConfigError(f"working_dir {source} must be a directory or a .zip/.tar.gz/.tgz/"
                      ".tar.xz archive", hint="point working_dir at the directory")


def package_uri(source: Path, *, kind: Kind, excludes: Sequence[str] = (),
                env: Mapping[str, str] | None = None, use_cache: bool = True) -> str:
    """Ray's exact URI for a local working_dir / py_modules entry."""
    source = Path(source).absolute()
    if source.is_file():
        what = file_source_kind(source, kind)
        if what == "whl":
            return f"gcs://{source.name}"
        if what == "archive":
            return archive_uri(source)
        return uri_for_acc(fold(EMPTY_ACC, entry_digest(source.name, source, False)))
    scan = scan_package(source, kind=kind, excludes=excludes, env=env)
    return scan_uri(scan, digest_entries(scan.entries, use_cache=use_cache))
