"""Linux inotify on exactly the directories a package holds: one instance, one reader thread,
one watch per packaged directory.

Hand-written (ctypes on libc's three inotify calls) instead of watchdog's Observer, which can
only watch a tree recursively (a watch on every directory below the root, ignored ones such as a
`.venv` with thousands of directories included) or spend an emitter thread per non-recursive
watch; it has no public API for a chosen set of directories on one instance. watchdog still
serves the other platforms and the polling fallback (events.py).

What the kernel says is passed on (`on_event(path, complete)`):
- a write is complete when its file is closed (IN_CLOSE_WRITE); a modify or a create without
  that close yet is a write still open (`complete=False`: the debouncer waits for it);
- a rename into place (an editor's atomic save), a delete, a mode change and a new directory are
  complete at once;
- a queue overflow (IN_Q_OVERFLOW: events were lost) calls `on_overflow`: the caller re-checks
  the whole tree, and new directories are looked for again.

A directory that appears (created, moved in) is watched at once if `wants_dir` says it is
packaged, with its packaged subdirectories; a file written in it before its watch was added is
found by the snapshot's walk of the directory, which the reported path triggers.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import functools
import os
import select
import stat
import struct
import threading
from collections.abc import Callable, Iterable

IN_MODIFY = 0x2
IN_ATTRIB = 0x4
IN_CLOSE_WRITE = 0x8
IN_MOVED_FROM = 0x40
IN_MOVED_TO = 0x80
IN_CREATE = 0x100
IN_DELETE = 0x200
IN_DELETE_SELF = 0x400
IN_MOVE_SELF = 0x800
IN_Q_OVERFLOW = 0x4000
IN_IGNORED = 0x8000
IN_ONLYDIR = 0x1000000
IN_ISDIR = 0x40000000
IN_NONBLOCK = os.O_NONBLOCK
IN_CLOEXEC = os.O_CLOEXEC

MASK = (IN_MODIFY | IN_ATTRIB | IN_CLOSE_WRITE | IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE
        | IN_DELETE | IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR)
_HEADER = struct.Struct("iIII")  # struct inotify_event: wd, mask, cookie, len (then the name)
_BUFFER = 256 * 1024


def available() -> bool:
    return hasattr(os, "O_NONBLOCK") and _libc() is not None


@functools.cache
def _libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    try:
        lib = ctypes.CDLL(name or "libc.so.6", use_errno=True)
        lib.inotify_init1  # noqa: B018 - absent outside Linux: AttributeError
    except (OSError, AttributeError):
        return None
    lib.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
    lib.inotify_rm_watch.argtypes = [ctypes.c_int, ctypes.c_int]
    return lib


def _oserror(what: str) -> OSError:
    code = ctypes.get_errno()
    return OSError(code, f"{what}: {os.strerror(code)}")


class InotifyTree:
    """Watches `roots` (directories, each walked for the packaged directories below it with
    `wants_dir`) and `files`' directories (non-recursively: a runtime_env file outside every
    root) until `stop()`."""

    mode = "native"

    def __init__(self, roots: Iterable[str], on_event: Callable[[str, bool], None], *,
                 wants_dir: Callable[[str], bool], extra_dirs: Iterable[str] = (),
                 on_overflow: Callable[[], None] | None = None) -> None:
        self.roots = [os.path.abspath(r) for r in roots]
        self.extra_dirs = [os.path.abspath(d) for d in extra_dirs]
        self.on_event, self.wants_dir = on_event, wants_dir
        self.on_overflow = on_overflow
        lib = _libc()
        if lib is None:
            raise OSError(errno.ENOSYS, "inotify is not available")
        self._lib: ctypes.CDLL = lib
        self._fd = -1
        self._paths: dict[int, set[str]] = {}  # wd -> directories (a symlinked dir shares one)
        self._wds: dict[str, int] = {}
        self._lock = threading.Lock()
        self._wake_r, self._wake_w = -1, -1
        self._thread: threading.Thread | None = None

    # -- watches -------------------------------------------------------------------------------
    @property
    def fd(self) -> int:
        return self._fd

    def watched(self) -> set[str]:
        with self._lock:
            return set(self._wds)

    def _add(self, path: str) -> bool:
        """Watch `path`; False when it is gone or not a directory, or its inode is watched
        under another path already (a symlink loop: not walked again)."""
        wd = self._lib.inotify_add_watch(self._fd, os.fsencode(path), MASK)
        if wd < 0:
            err = ctypes.get_errno()
            if err in (errno.ENOENT, errno.ENOTDIR, errno.EACCES, errno.ELOOP):
                return False
            raise OSError(err, f"inotify_add_watch {path}: {os.strerror(err)}")
        with self._lock:
            seen = wd in self._paths
            self._paths.setdefault(wd, set()).add(path)
            self._wds[path] = wd
        return not seen

    def add_tree(self, top: str, *, rewalk: bool = False) -> None:
        """Watch `top` and every directory below it that `wants_dir` keeps (an ignored one is
        neither watched nor walked); `rewalk`: walk below directories watched already too."""
        stack = [top]
        seen: set[int] = set()  # this walk's watches (a symlink loop ends at the first repeat)
        while stack:
            path = stack.pop()
            wd = self._wds.get(path)
            if wd is not None and not rewalk:
                continue
            if wd is None and not self._add(path):
                continue
            wd = self._wds.get(path)
            if wd is None or wd in seen:
                continue
            seen.add(wd)
            try:
                with os.scandir(path) as it:
                    children = [e.path for e in it if _is_dir(e)]
            except OSError:
                continue
            stack.extend(c for c in children if self.wants_dir(c))

    def refresh(self) -> None:
        """Watch what is packaged now (after an ignore file or an overflow): add watches for
        packaged directories not yet watched, drop those of directories now ignored."""
        for root in self.roots:
            self.add_tree(root, rewalk=True)
        for path in self.watched():
            if path in self.roots or path in self.extra_dirs:
                continue
            if not self.wants_dir(path):
                self._remove(path)

    def _remove(self, path: str) -> None:
        with self._lock:
            wd = self._wds.pop(path, None)
            if wd is None:
                return
            paths = self._paths.get(wd, set())
            paths.discard(path)
            last = not paths
            if last:
                self._paths.pop(wd, None)
        if last:
            self._lib.inotify_rm_watch(self._fd, wd)

    # -- life ----------------------------------------------------------------------------------
    def start(self) -> None:
        fd = self._lib.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if fd < 0:
            raise _oserror("inotify_init1")
        self._fd = fd
        try:
            for path in self.extra_dirs:
                self._add(path)
            for root in self.roots:
                self.add_tree(root)
        except BaseException:
            os.close(fd)
            self._fd = -1
            raise
        self._wake_r, self._wake_w = os.pipe()
        self._thread = threading.Thread(target=self._run, name="rtenv-inotify", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._thread is not None:
            os.write(self._wake_w, b"x")
            self._thread.join(timeout=5)
            self._thread = None
        for fd in (self._wake_r, self._wake_w, self._fd):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._wake_r = self._wake_w = self._fd = -1
        with self._lock:
            self._paths.clear()
            self._wds.clear()

    def _run(self) -> None:
        poller = select.poll()
        poller.register(self._fd, select.POLLIN)
        poller.register(self._wake_r, select.POLLIN)
        while True:
            ready = {fd for fd, _ev in poller.poll()}
            if self._wake_r in ready:
                return
            try:
                data = os.read(self._fd, _BUFFER)
            except BlockingIOError:
                continue
            except OSError:
                return
            # a callback's error must not end the watch: the next reconcile scan recovers
            with contextlib.suppress(Exception):
                self._dispatch(data)

    def _dispatch(self, data: bytes) -> None:
        at = 0
        while at + _HEADER.size <= len(data):
            wd, mask, _cookie, length = _HEADER.unpack_from(data, at)
            name = data[at + _HEADER.size: at + _HEADER.size + length].rstrip(b"\0")
            at += _HEADER.size + length
            if mask & IN_Q_OVERFLOW:
                if self.on_overflow is not None:
                    self.on_overflow()
                continue
            with self._lock:
                dirs = sorted(self._paths.get(wd, ()))
            if mask & IN_IGNORED:  # the directory is gone (or unwatched)
                for d in dirs:
                    self._remove(d)
                continue
            for directory in dirs:
                self._event(directory, os.fsdecode(name), mask)

    def _event(self, directory: str, name: str, mask: int) -> None:
        if not name:  # the watched directory itself moved or was deleted
            if mask & (IN_DELETE_SELF | IN_MOVE_SELF):
                self.on_event(directory, True)
            return
        path = os.path.join(directory, name)
        if mask & IN_ISDIR and mask & (IN_CREATE | IN_MOVED_TO) and self.wants_dir(path):
            self.add_tree(path)
        if mask & IN_ISDIR and mask & (IN_DELETE | IN_MOVED_FROM):
            for sub in [p for p in self.watched() if p == path or p.startswith(path + os.sep)]:
                self._remove(sub)
        if mask & IN_ISDIR and mask & IN_MODIFY:
            return  # not sent by Linux; a child's own event says what changed
        open_write = bool(mask & IN_MODIFY) or (bool(mask & IN_CREATE) and not mask & IN_ISDIR
                                                and _regular(path))
        self.on_event(path, not open_write)


def _is_dir(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_dir()  # follows symlinks, as Ray's walk does
    except OSError:
        return False


def _regular(path: str) -> bool:
    """A regular file (not a symlink: a symlink is complete when created; a file is opened to
    be written and closed after)."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def watch_count(fd: int) -> int:
    """The watches an inotify instance holds, as the kernel counts them (/proc fdinfo)."""
    with open(f"/proc/self/fdinfo/{fd}") as fh:
        return sum(1 for line in fh if line.startswith("inotify wd:"))
