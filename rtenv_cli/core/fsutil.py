"""Atomic writes: temp file in the same directory, fsync, rename, fsync the directory; and
checksummed cache files (rename without fsync: whatever a crash leaves reads whole or as none).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any


def fsync_dir(path: Path) -> None:
    """Make a rename in `path` durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_open(path: Path, mode: str = "wb", perms: int = 0o644) -> Iterator[IO[Any]]:
    """Write to a temp file beside `path`; on success fsync and rename it into place.

    On any exception the temp file is removed and `path` is untouched.
    """
    import tempfile

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, mode) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, perms)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    fsync_dir(path.parent)


def atomic_write_bytes(path: Path, data: bytes, perms: int = 0o644) -> None:
    with atomic_open(path, "wb", perms) as fh:
        fh.write(data)


def atomic_write_text(path: Path, text: str, perms: int = 0o644) -> None:
    atomic_write_bytes(path, text.encode("utf-8"), perms)


_CACHE_HEAD = b"rtenv-cache 1\n"  # then the crc32 of the marshalled body, then the body


def write_cache(path: Path, value: Any) -> None:
    """Keep `value` (plain data: marshal) in a cache file of rtenv's home: renamed into place,
    not fsynced, with a checksum, so `read_cache` gets it whole or not at all after a crash (a
    cache costs its rebuild when lost; an fsync per write would cost more than most save). The
    old file is unlinked first: a rename over an existing file makes ext4 write the new one's
    data out at once (auto_da_alloc), and a reader in between finds no cache, which is allowed."""
    import marshal
    import zlib

    body = marshal.dumps(value)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_bytes(_CACHE_HEAD + zlib.crc32(body).to_bytes(4, "little") + body)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        os.rename(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def read_cache(path: Path) -> Any:
    """What `write_cache` kept at `path`, or None when it is missing, torn or foreign."""
    import marshal
    import zlib

    try:
        raw = path.read_bytes()
    except OSError:
        return None
    head = len(_CACHE_HEAD) + 4
    if raw[:len(_CACHE_HEAD)] != _CACHE_HEAD or \
            int.from_bytes(raw[len(_CACHE_HEAD):head], "little") != zlib.crc32(raw[head:]):
        return None
    try:
        # _MARSHAL: rtenv's own file in the user's private home; marshal builds plain data
        # (it runs no code, unlike pickle); another Python's format fails to load: no cache
        return marshal.loads(raw[head:])  # noqa: S302 - see above
    except (ValueError, EOFError, TypeError):
        return None
