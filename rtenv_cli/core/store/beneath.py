"""Open a file beneath a directory, once, without following a link out of it.

The agent unpacks a client's `file://` archive only under a directory it was told to share
(`rtenv agent --allow-file-root`). Checking the resolved path and then opening it by name
leaves a window in which a link can be swapped (red team 2, M1: 3 escapes in 300 tries), so the
file is opened exactly once, relative to a descriptor of the root, and that descriptor-held
file is what gets unpacked.

Linux's openat2(2) does this in the kernel: RESOLVE_BENEATH refuses any step of the walk that
leaves the root (`..`, an absolute or escaping symlink), RESOLVE_NO_MAGICLINKS refuses
/proc-style links. Python's stdlib has no openat2 (3.11 to 3.13), so it is called through
ctypes. Where it is missing (an old kernel, another OS, a seccomp filter answering ENOSYS or
EPERM) the walk is done by hand: one `openat` per component with O_NOFOLLOW, each but the
last checked to be a directory. That fallback refuses every symlink, even one that stays
inside the root (following links by hand is the bug this module exists to avoid).
"""

from __future__ import annotations

import errno
import functools
import os
import stat
import sys
from pathlib import Path, PurePosixPath
from typing import IO, Any

from rtenv_cli.core.errors import ForbiddenError, PackagingError

_SYS_OPENAT2 = 437  # the same number on every Linux architecture (a syscall added after 5.1)
_RESOLVE_NO_MAGICLINKS = 0x02
_RESOLVE_BENEATH = 0x08
_FILE_FLAGS = os.O_RDONLY | os.O_CLOEXEC | os.O_NOCTTY | os.O_NONBLOCK  # a FIFO cannot block
_DIR_FLAGS = os.O_RDONLY | os.O_CLOEXEC | os.O_DIRECTORY | os.O_NOFOLLOW
_HINT = "point file:// at a .zip (or a .whl in py_modules)"
_ESCAPES = (errno.EXDEV, errno.ELOOP)  # left the root / met a link where none may be


@functools.cache
def _openat2() -> Any:
    """libc's syscall(), or None where openat2 cannot be called (not Linux)."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes  # imported on first use: most commands never open a file:// archive

    class OpenHow(ctypes.Structure):
        _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64),
                    ("resolve", ctypes.c_uint64)]

    syscall = ctypes.CDLL(None, use_errno=True).syscall
    syscall.restype = ctypes.c_long

    def call(dir_fd: int, rel: str, flags: int) -> int:
        how = OpenHow(flags, 0, _RESOLVE_BENEATH | _RESOLVE_NO_MAGICLINKS)
        fd = syscall(_SYS_OPENAT2, ctypes.c_int(dir_fd), os.fsencode(rel), ctypes.byref(how),
                     ctypes.c_size_t(ctypes.sizeof(how)))
        if fd < 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err), rel)
        return int(fd)

    return call


def _walk(dir_fd: int, rel: str) -> int:
    """The hand-written fallback: one component at a time, links refused."""
    parts = [p for p in PurePosixPath(rel).parts if p != "."]
    fd = os.dup(dir_fd)
    try:
        for part in parts[:-1]:
            try:
                nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except NotADirectoryError:  # O_DIRECTORY|O_NOFOLLOW on a link says ENOTDIR
                if stat.S_ISLNK(os.stat(part, dir_fd=fd, follow_symlinks=False).st_mode):
                    raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), part) from None
                raise
            os.close(fd)
            fd = nxt
        return os.open(parts[-1], _FILE_FLAGS | os.O_NOFOLLOW, dir_fd=fd)
    finally:
        os.close(fd)


def _open_at(dir_fd: int, rel: str, *, kernel: bool) -> int:
    call = _openat2() if kernel else None
    if call is not None:
        try:
            return int(call(dir_fd, rel, _FILE_FLAGS))
        except OSError as exc:
            if exc.errno not in (errno.ENOSYS, errno.EPERM):
                raise
    return _walk(dir_fd, rel)


def open_beneath(root: Path, rel: str, *, what: str, kernel: bool = True) -> IO[bytes]:
    """The regular file `rel` (relative, "/"-separated) under the directory `root`, open for
    reading; ForbiddenError if reaching it leaves `root` or (by hand) meets a link,
    PackagingError if it is missing or not a regular file. `what` names it in errors.
    `kernel=False` forces the hand-written walk (its tests)."""
    path = PurePosixPath(rel)
    if path.is_absolute() or ".." in path.parts or not rel.strip("/."):
        raise ForbiddenError(f"{what} is not a file beneath {root}",
                             hint="name a file under the allowed root, without `..`")
    root_fd = os.open(root, os.O_RDONLY | os.O_CLOEXEC | os.O_DIRECTORY)
    try:
        fd = _open_at(root_fd, rel, kernel=kernel)
    except OSError as exc:
        if exc.errno in _ESCAPES:
            raise ForbiddenError(f"{what} leaves {root} through a link, which the agent does "
                                 "not follow", hint="put the archive itself under the "
                                 "allowed root (a link that stays inside it is followed "
                                 "where the kernel has openat2)") from None
        raise PackagingError(f"{what} cannot be opened: {exc.strerror}", hint=_HINT) from None
    finally:
        os.close(root_fd)
    return _regular(fd, what)


def open_regular(path: Path, *, what: str) -> IO[bytes]:
    """The regular file at `path`, open for reading (links followed: no root to keep to);
    PackagingError if it cannot be opened or is not a regular file (a FIFO does not block)."""
    try:
        fd = os.open(path, _FILE_FLAGS)
    except OSError as exc:
        raise PackagingError(f"{what} cannot be opened: {exc.strerror}", hint=_HINT) from None
    return _regular(fd, what)


def _regular(fd: int, what: str) -> IO[bytes]:
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise PackagingError(f"{what} is not an archive file", hint=_HINT)
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def open_under_roots(path: Path, roots: tuple[Path, ...], *, what: str) -> IO[bytes]:
    """The regular file at the absolute `path`, opened beneath the first of `roots` that
    holds it by name (as given or resolved: the roots themselves are the operator's), as
    `open_beneath` does; ForbiddenError if none does."""
    for root in roots:
        for base in dict.fromkeys((Path(os.path.abspath(root)), root.resolve())):
            if path.is_absolute() and path.is_relative_to(base):
                return open_beneath(base, path.relative_to(base).as_posix(), what=what)
    raise ForbiddenError(f"{what} is not under a directory the agent shares",
                         hint="share its directory with `rtenv agent --allow-file-root DIR`")
