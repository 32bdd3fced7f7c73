"""The store's locks: one per key (a thread lock and a flock on `locks/<key>.lock`, so identical
creates build once across threads and processes), and `owners.lock`, which every process with
the store open holds shared (the first to get it exclusively knows it is alone)."""

from __future__ import annotations

import contextlib
import os
import re
import threading
import weakref
from collections.abc import Iterator
from pathlib import Path

try:
    import fcntl
except ImportError:  # not POSIX
    fcntl = None  # type: ignore[assignment]

_KEY_SAFE = re.compile(r"[^A-Za-z0-9_.-]")


def safe_key(key: str) -> str:
    """`key` as a file name (anything outside [A-Za-z0-9_.-] becomes `_`)."""
    return _KEY_SAFE.sub("_", key)


class KeyLocks:
    """Per-key exclusive locks under `folder` (the store's locks/)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._thread_locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()

    def path(self, key: str) -> Path:
        return self.folder / f"{safe_key(key)}.lock"

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
            path = self.path(key)
            if fcntl is not None:
                fd = _flock_file(path, blocking=blocking)
                if fd is None:
                    yield False
                    return
                try:
                    yield True
                finally:
                    _let_go(path, fd)
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


class Owners:
    """`owners.lock` under the root, held by this object for its life."""

    def __init__(self, root: Path) -> None:
        self._fd = os.open(root / "owners.lock", os.O_RDWR | os.O_CREAT, 0o600)
        weakref.finalize(self, os.close, self._fd)

    def claim(self) -> bool:
        """Hold the lock shared; True if this process had it exclusively first (no other
        store is open on this root, in any process): then it stays exclusive until `share`."""
        if fcntl is None:
            return False
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fcntl.flock(self._fd, fcntl.LOCK_SH)  # waits out another's exclusive recovery
            return False
        return True

    def share(self) -> None:
        """From exclusive to shared: others may open the store too."""
        if fcntl is not None:
            fcntl.flock(self._fd, fcntl.LOCK_SH)

    def release(self) -> None:
        if fcntl is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)


def _flock_file(path: Path, *, blocking: bool) -> int | None:
    """An fd holding `path` locked (flock), or None if `blocking` is off and it is taken.

    Its holder removes the lock file as it lets go (`_let_go`), while others may wait on it: a
    lock won on a file that no longer has that name is let go and taken again on the current
    one. So a lock is held only while `path` names the locked file, and only its holder can
    unlink that name: two holders never overlap.
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


def _let_go(path: Path, fd: int) -> None:
    """Remove the lock file, still holding its lock, then release it (closing the descriptor
    releases the flock). Lock files exist only while held: none is left behind by an entry
    removed, a build that failed, a package asked for that never came. A waiter on this file
    finds the name gone (or naming a newer file) and locks afresh (`_flock_file`)."""
    try:
        if os.stat(path).st_ino == os.fstat(fd).st_ino:
            os.unlink(path)
    except FileNotFoundError:  # recovery, alone on the store, cleared locks/
        pass
    finally:
        os.close(fd)
