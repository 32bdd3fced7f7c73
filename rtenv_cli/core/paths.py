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

TYPE_CHECKING = False  # typing's and pathlib's imports: see home_location
if TYPE_CHECKING:
    from pathlib import Path

# pathlib and errors (dataclasses, inspect) are imported where they are used: the resident
# client (resident/client.py) imports this module for home_location() before anything else

HOME_ENV = "RTENV_HOME"
_TRUSTED: set[tuple[str, int, int, int, int]] = set()  # (path, dev, ino, uid, mode) checked


def rtenv_home() -> Path:
    """The root of the embedded default: the local store, digest cache and logs (made 0700 if
    absent; refused if it is not this user's alone, see `private_dir`)."""
    from pathlib import Path

    where, what = home_location()
    return private_dir(Path(where), what)


def forget_trusted() -> None:
    """Check every directory again on its next use (the resident rtenv's child, forked from a
    process that checked them earlier, as a new process would)."""
    _TRUSTED.clear()


def home_location() -> tuple[str, str]:
    """Where rtenv's home is (not made, not checked: `rtenv_home` does both), and what names it
    in errors. A string: the resident client (resident/client.py) finds the daemon's socket
    from it before pathlib, the CLI or typer are imported."""
    override = os.environ.get(HOME_ENV)
    if override:
        return os.path.expanduser(override), HOME_ENV
    from platformdirs import user_cache_dir

    return user_cache_dir("rtenv", appauthor=False), "rtenv's home"


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

    Returns the directory's real path (links resolved), which is what was checked: a caller
    keeps using that, never the name it was given, since a link on the way (another user's, in
    /tmp) could later point somewhere else while a long-lived process (the agent, the plugin)
    still uses the name.
    """
    if not hasattr(os, "geteuid"):  # no POSIX owners (Windows): nothing to compare
        return path
    try:
        _make_private(path)
        from pathlib import Path

        real = Path(os.path.realpath(path))
        st = os.lstat(real)  # a link swapped in since realpath is no directory: refused
        key = (str(real), st.st_dev, st.st_ino, st.st_uid, st.st_mode)
        if key not in _TRUSTED:
            _check(real, what, st, named=path)
            _TRUSTED.add(key)
    except OSError as exc:
        from rtenv_cli.core.errors import UsageError

        raise UsageError(f"cannot use {what} {path}: {exc.strerror or exc}", path=str(path),
                         hint=f"choose a directory this user can create and write (set "
                         f"{HOME_ENV}, or --root for `rtenv agent`)") from None
    return real


def _check(real: Path, what: str, st: os.stat_result, *, named: Path) -> None:
    """private_dir's rule for the directory `real` (`st`, no link in its path) and its
    ancestors; errors name it as the user did (`named`), and where a link led."""
    problem = _problem(real, what, st, named=named)
    if problem is not None:
        from rtenv_cli.core.errors import UsageError

        raise UsageError(problem[0], path=str(named), hint=problem[1])


def _problem(real: Path, what: str, st: os.stat_result, *,
             named: Path) -> tuple[str, str] | None:
    """What is wrong with `real` and its ancestors (message, hint), or None."""
    me = os.geteuid()
    linked = os.path.abspath(named) != str(real)
    shown = f"{named} (a link to {real})" if linked else str(named)
    elsewhere = f"choose another directory (set {HOME_ENV}, or --root for `rtenv agent`)"
    if not stat.S_ISDIR(st.st_mode):
        return f"{what} {shown} is not a directory", f"remove it, or {elsewhere}"
    if st.st_uid != me or _writable_by_others(st):
        return (f"{what} {shown} is not this user's alone: owned by {owner_name(st.st_uid)}, "
                f"mode {stat.S_IMODE(st.st_mode):04o}; another user could change what rtenv "
                "runs",
                f"`chown {user_name(me)} {real} && chmod 700 {real}` if it is yours, or "
                f"{elsewhere}")
    for parent in real.parents:
        pst = os.stat(parent)
        if pst.st_uid not in (me, 0) or (_writable_by_others(pst)
                                         and not pst.st_mode & stat.S_ISVTX):
            return (f"{what} {shown} is in {parent}, which another user can change: owned by "
                    f"{owner_name(pst.st_uid)}, mode {stat.S_IMODE(pst.st_mode):04o} (it could "
                    "replace the directory)",
                    f"{elsewhere}, under one that only this user and root can write, e.g. "
                    "under $HOME")
    return None


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
