"""Atomic writes: temp file in the same directory, fsync, rename, fsync the directory;
checksummed cache files (rename without fsync: whatever a crash leaves reads whole or as none);
and file locks across processes (flock(2), waited for without end, not at all, or a while).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    from filelock import BaseFileLock

try:
    import fcntl
except ImportError:  # not POSIX: no flock; LockFile takes filelock's lock instead
    fcntl = None  # type: ignore[assignment]  # mypy types the name as the module, never None

HAVE_FLOCK = fcntl is not None
_LOCK_POLL_S = 0.02  # how often a bounded wait for a lock tries again


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


def flock(fd: int, wait: float | None = None, *, shared: bool = False) -> bool:
    """Lock the open file `fd` with flock(2), exclusively (or `shared`: many hold it, none
    exclusively; a holder converts its lock either way); True once held, False if not had in
    time. `wait` None waits until it is had (the kernel wakes the waiter as the holder lets go:
    no polling), 0 tries once, a number tries every _LOCK_POLL_S for at most that many seconds.

    The lock belongs to the open file description: two opens of one file exclude each other,
    even in one process, but threads sharing `fd` do not (hold a thread lock in front). Closing
    the last descriptor of it, or `unflock`, lets go. Only where HAVE_FLOCK."""
    assert fcntl is not None  # noqa: S101 - a caller's bug: callers check HAVE_FLOCK
    how = fcntl.LOCK_SH if shared else fcntl.LOCK_EX
    if wait is None:
        fcntl.flock(fd, how)
        return True
    deadline = time.monotonic() + wait
    while True:
        try:
            fcntl.flock(fd, how | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(_LOCK_POLL_S)


def unflock(fd: int) -> None:
    """Let go of `flock`'s lock on `fd`, keeping the descriptor open."""
    assert fcntl is not None  # noqa: S101 - a caller's bug: callers check HAVE_FLOCK
    fcntl.flock(fd, fcntl.LOCK_UN)


class LockFile:
    """An exclusive lock, across processes, on the file `path` (made with `mode` if missing):
    `acquire` waits for it as `flock` does, `wait` seconds (None: until had, 0: not at all),
    then raises TimeoutError (an OSError) naming `path`. A context manager; not re-entrant.

    Each acquire opens its own descriptor and `release` closes it, which lets go of the flock.
    A lock won on a file that no longer has that name (its holder removed it) is let go and
    taken again on the current one: the lock is held only while `path` names the locked file.
    With `remove`, `release` unlinks that name first, if it still names the locked file: lock
    files then exist only while held, and as only the holder unlinks the name, two holders never
    overlap.

    Where there is no flock (not POSIX) it is the `filelock` package's lock, with that
    package's own rule for its file; imported only there: importing it costs a cold build more
    than the digest cache's whole fold (fastpaths.json: "import filelock")."""

    def __init__(self, path: str | os.PathLike[str], wait: float | None = None, *,
                 remove: bool = False, mode: int = 0o600) -> None:
        self.path, self.wait, self.remove, self.mode = os.fspath(path), wait, remove, mode
        self._fd = -1
        self._fallback: BaseFileLock | None = None

    def acquire(self) -> None:
        if fcntl is None:
            from filelock import FileLock

            lock = FileLock(self.path, mode=self.mode, thread_local=False)
            lock.acquire(timeout=-1 if self.wait is None else self.wait,
                         poll_interval=_LOCK_POLL_S)  # raises filelock.Timeout: a TimeoutError
            self._fallback = lock
            return
        deadline = None if self.wait is None else time.monotonic() + self.wait
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, self.mode)
            try:
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                if not flock(fd, left):
                    raise TimeoutError(f"{self.path} is held by another process")
                if _names(self.path, fd):
                    self._fd, fd = fd, -1
                    return
            finally:
                if fd >= 0:
                    os.close(fd)

    def release(self) -> None:
        if self._fallback is not None:
            self._fallback.release()
            self._fallback = None
            return
        fd, self._fd = self._fd, -1
        try:
            if self.remove and _names(self.path, fd):
                with contextlib.suppress(FileNotFoundError):  # removed meanwhile by one
                    os.unlink(self.path)  # alone on the folder (a store's recovery)
        finally:
            os.close(fd)

    def __enter__(self) -> LockFile:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def _names(path: str, fd: int) -> bool:
    """Whether `path` names the file open at `fd` (False once it is removed or replaced)."""
    try:
        return os.stat(path).st_ino == os.fstat(fd).st_ino
    except FileNotFoundError:
        return False
