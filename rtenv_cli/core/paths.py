"""Where rtenv keeps its state: RTENV_HOME, else the user's cache dir (platformdirs).

A directory rtenv keeps state in (the home, a store) is trusted only if this user owns it and
nobody else can write it or replace it, as ssh's StrictModes trusts ~/.ssh (`private_dir`):
what another user can write there (a cached environment's files, the token, the ignore cache)
would otherwise run or be believed as this user.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

from rtenv_cli.core.errors import UsageError

HOME_ENV = "RTENV_HOME"
_TRUSTED: set[tuple[str, int, int, int, int]] = set()  # (path, dev, ino, uid, mode) checked


def rtenv_home() -> Path:
    """The root of the embedded default: the local store, digest cache and logs (made 0700 if
    absent; refused if it is not this user's alone, see `private_dir`)."""
    override = os.environ.get(HOME_ENV)
    if override:
        return private_dir(Path(override).expanduser(), HOME_ENV)
    from platformdirs import user_cache_dir

    return private_dir(Path(user_cache_dir("rtenv", appauthor=False)), "rtenv's home")


def store_root() -> Path:
    """The embedded agent's store (packages, environments, index)."""
    return rtenv_home() / "store"


def digest_cache_path() -> Path:
    """The persistent (path, size, mtime_ns, inode, mode) -> digest cache (a file per root)."""
    return rtenv_home() / "digests"


def log_path() -> Path:
    return rtenv_home() / "rtenv.log"


def user_name(uid: int) -> str:
    """The user's name, or the uid's digits for a uid with no passwd entry."""
    import pwd

    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def owner_name(uid: int) -> str:
    """`name (uid N)`: how errors name the owner of a file or a socket."""
    return f"{user_name(uid)} (uid {uid})"


def _writable_by_others(st: os.stat_result) -> bool:
    return bool(st.st_mode & (stat.S_IWGRP | stat.S_IWOTH))


def private_dir(path: Path, what: str) -> Path:
    """`path`, once it is a directory this user owns and no one else (group or other) can
    write, in a parent no one else can replace it from (each ancestor owned by this user or
    root, and writable by others only with the sticky bit, as /tmp). Missing directories are
    made 0700 first, so a directory that appears in between (another user's, in /tmp) is
    checked like any other. Otherwise a UsageError naming the path, its owner and mode.

    Root is held to the same rule: a directory of another user is refused whatever its mode.
    Checked once per process for a directory that stays the same (device, inode, owner, mode).
    """
    if not hasattr(os, "geteuid"):  # no POSIX owners (Windows): nothing to compare
        return path
    try:
        _make_private(path)
        st = os.stat(path)
        key = (str(path), st.st_dev, st.st_ino, st.st_uid, st.st_mode)
        if key not in _TRUSTED:
            _check(path, what, st)
            _TRUSTED.add(key)
    except OSError as exc:
        raise UsageError(f"cannot use {what} {path}: {exc.strerror or exc}", path=str(path),
                         hint=f"choose a directory this user can create and write (set "
                         f"{HOME_ENV}, or --root for `rtenv agent`)") from None
    return path


def _check(path: Path, what: str, st: os.stat_result) -> None:
    """private_dir's rule for the directory `path` (`st`) and its ancestors."""
    me = os.geteuid()
    elsewhere = f"choose another directory (set {HOME_ENV}, or --root for `rtenv agent`)"
    if not stat.S_ISDIR(st.st_mode):
        raise UsageError(f"{what} {path} is not a directory", path=str(path),
                         hint=f"remove it, or {elsewhere}")
    if st.st_uid != me or _writable_by_others(st):
        raise UsageError(
            f"{what} {path} is not this user's alone: owned by {owner_name(st.st_uid)}, mode "
            f"{stat.S_IMODE(st.st_mode):04o}; another user could change what rtenv runs",
            path=str(path),
            hint=f"`chown {user_name(me)} {path} && chmod 700 {path}` if it is yours, or "
            f"{elsewhere}")
    for parent in Path(os.path.realpath(path)).parents:
        pst = os.stat(parent)
        if pst.st_uid not in (me, 0) or (_writable_by_others(pst)
                                         and not pst.st_mode & stat.S_ISVTX):
            raise UsageError(
                f"{what} {path} is in {parent}, which another user can change: owned by "
                f"{owner_name(pst.st_uid)}, mode {stat.S_IMODE(pst.st_mode):04o} (it could "
                "replace the directory)", path=str(path),
                hint=f"{elsewhere}, under one that only this user and root can write, e.g. "
                "under $HOME")


def _make_private(path: Path) -> None:
    """Create `path` and any missing parent with mode 0700 (Path.mkdir's parents get the umask's
    default, 0775 under umask 002)."""
    missing = []
    probe = path.absolute()
    while not os.path.lexists(probe) and probe != probe.parent:
        missing.append(probe)
        probe = probe.parent
    for part in reversed(missing):
        with contextlib.suppress(FileExistsError):  # made in between: checked like any other
            os.mkdir(part, 0o700)
