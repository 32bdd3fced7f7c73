"""File primitives of the store: durable writes, streamed copies with a hash, disk-full
detection and removal of whatever a path is. They know nothing of the store's layout."""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
from pathlib import Path
from typing import BinaryIO, Protocol

from rtenv_cli.core.errors import DiskFullError, PackagingError, RtenvError

CHUNK = 1 << 20
NO_SPACE = (errno.ENOSPC, errno.EDQUOT)


class Stream(Protocol):
    """What a blob batch is read from: a file, or a request body (agent.bodyreader)."""

    def read(self, n: int = -1, /) -> bytes: ...

    def readline(self, limit: int = -1, /) -> bytes: ...


class Limited:
    """The next `size` bytes of a stream, as a file for `copy_in`; short input is an error."""

    def __init__(self, stream: BinaryIO | Stream, size: int) -> None:
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


class Hasher(Protocol):
    def update(self, data: bytes, /) -> None: ...


def copy_in(src: Path | BinaryIO | Limited, dest: Path, hasher: Hasher | None = None, *,
            fsync: bool = True) -> int:
    """Copy `src` (a path or a readable) to `dest`, feeding `hasher`; the bytes copied."""
    size = 0
    reader = src.open("rb") if isinstance(src, Path) else contextlib.nullcontext(src)
    with reader as fh, dest.open("wb") as out:
        while chunk := fh.read(CHUNK):
            size += len(chunk)
            if hasher is not None:
                hasher.update(chunk)
            out.write(chunk)
        out.flush()
        if fsync:
            os.fsync(out.fileno())
    return size


def sync_fs(path: Path) -> None:
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


def write_synced(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)


def out_of_space(exc: BaseException) -> bool:
    """An exception caused by a full disk: an OSError ENOSPC/EDQUOT, or a build tool's error
    (uv's) that reports one in its text."""
    if isinstance(exc, DiskFullError):
        return False  # already said
    if isinstance(exc, OSError):
        return exc.errno in NO_SPACE
    return isinstance(exc, RtenvError) and ("No space left on device" in exc.message
                                            or "Disk quota exceeded" in exc.message)


def as_oserror(exc: BaseException) -> OSError:
    return exc if isinstance(exc, OSError) else OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def remove_path(path: Path) -> None:
    """Remove a file, link or directory tree, whichever it is (a spool file is a file)."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(OSError):
            path.unlink()


def disk_bytes(st: os.stat_result) -> int:
    """A file's size on disk, as du counts it (the allocated blocks)."""
    return st.st_blocks * 512 if hasattr(st, "st_blocks") else st.st_size


def dir_size(path: Path) -> int:
    """What `path` takes on disk, as `du -s --block-size=1` counts it: the allocated blocks of
    `path` and of every directory, file and symlink below it (links are not followed), each
    inode once, so a file hardlinked twice in the tree counts once. A file also linked from
    outside the tree (a venv's file from uv's cache) counts here all the same. This is the size
    `rtenv cache ls` shows; the node scan (cache/ray_scan.py `du`) keeps a stdlib copy, and
    tests/core/store/test_dir_size.py checks the two agree. 0 when `path` does not exist."""
    seen: set[tuple[int, int]] = set()

    def size(entry: str) -> tuple[int, bool]:
        try:
            st = os.lstat(entry)
        except OSError:  # removed meanwhile
            return 0, False
        if st.st_nlink > 1 and not stat.S_ISDIR(st.st_mode):
            if (st.st_dev, st.st_ino) in seen:
                return 0, False
            seen.add((st.st_dev, st.st_ino))
        return disk_bytes(st), stat.S_ISDIR(st.st_mode)

    total, is_dir = size(os.fspath(path))
    if not is_dir:  # a file, a symlink (not followed) or nothing
        return total
    for root, dirs, files in os.walk(path):
        total += sum(size(os.path.join(root, name))[0] for name in dirs + files)
    return total


def owner_pid(name: str) -> int | None:
    """The pid in a tmp/ name (`<key>.<pid>.<rand>`, `upload.<pid>.<rand>`), if any."""
    parts = name.rsplit(".", 2)
    return int(parts[1]) if len(parts) == 3 and parts[1].isdigit() else None  # noqa: PLR2004 - key.pid.rand
