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

from rtenv_cli.core.fsutil import HAVE_FLOCK, LockFile, flock, unflock

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
        """Hold `key` exclusively in this process (thread lock) and across processes (a flock
        on its lock file, which exists only while held: `LockFile(remove=True)`, so none is
        left behind by an entry removed, a build that failed, a package asked for that never
        came).

        Yields False when `blocking` is off and someone else holds it.
        """
        with self._guard:
            tlock = self._thread_locks.setdefault(key, threading.Lock())
        if not tlock.acquire(blocking=blocking):
            yield False
            return
        try:
            held = LockFile(self.path(key), None if blocking else 0, remove=True)
            try:
                held.acquire()
            except TimeoutError:
                if blocking:  # not the lock's wait (that has none): an OSError of the file
                    raise
                yield False  # another holds it
                return
            try:
                yield True
            finally:
                held.release()
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
        if not HAVE_FLOCK:
            return False
        if flock(self._fd, 0):
            return True
        flock(self._fd, shared=True)  # waits out another's exclusive recovery
        return False

    def share(self) -> None:
        """From exclusive to shared: others may open the store too."""
        if HAVE_FLOCK:
            flock(self._fd, shared=True)

    def release(self) -> None:
        if HAVE_FLOCK:
            unflock(self._fd)
