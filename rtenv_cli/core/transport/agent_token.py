"""The per-user agent token: what makes a loopback agent this user's and nobody else's.

`rtenv agent` without `--token` (and without `--no-token`) requires a bearer token it keeps in
`RTENV_HOME/agent-token` (mode 0600, made on its first start). rtenv's own clients running as
the same user read that file when they talk to an agent on loopback and were given no token,
so `rtenv run --address`, `rtenv push --to` and `rtenv cache --agent` need no flag; another
local user cannot read the file, so cannot use the agent as its user. The file is never sent
anywhere but to a loopback address.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import secrets
import stat
from pathlib import Path
from urllib.parse import urlsplit

from rtenv_cli.core.errors import UsageError

TOKEN_FILE = "agent-token"  # noqa: S105 - a file's name, not a secret


def token_path() -> Path:
    from rtenv_cli.core.paths import rtenv_home

    return rtenv_home() / TOKEN_FILE


def _private(st: os.stat_result) -> bool:
    return stat.S_ISREG(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & 0o077


def read_token(path: Path | None = None) -> str | None:
    """The token in the user's file, or None if there is none this user alone can read (a
    file others could read or write is not trusted)."""
    path = path or token_path()
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return None
    with os.fdopen(fd, "rb") as fh:
        if not _private(os.fstat(fh.fileno())):
            return None
        token = fh.read(256).decode("ascii", "replace").strip()
    return token or None


def user_token(path: Path | None = None) -> str:
    """The agent's token: the user's file's, else a new one written there (0600)."""
    path = path or token_path()
    if (token := read_token(path)) is not None:
        return token
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        with contextlib.suppress(FileNotFoundError):
            if not _private(path.lstat()):  # not ours alone: never reuse it
                path.unlink()
        token = secrets.token_urlsafe(32)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0),
                     0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(token + "\n")
        try:
            os.link(tmp, path)  # the first agent to start wins; a second reads its token
        except FileExistsError:
            pass
        finally:
            tmp.unlink()
    except OSError as exc:
        raise UsageError(f"cannot write the agent's token file {path}: {exc.strerror or exc}",
                         hint="set RTENV_HOME to a directory this user can write, or pass "
                         "--token / set RTENV_AGENT_TOKEN") from None
    got = read_token(path)
    if got is None:
        raise UsageError(f"the agent's token file {path} is not readable by this user alone",
                         hint=f"remove {path}; the agent writes a new one (mode 0600)")
    return got


def is_loopback_url(url: str) -> bool:
    host = urlsplit(url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def token_for(url: str) -> str | None:
    """The user's token for an agent at `url` that was given none: only a loopback agent's."""
    return read_token() if is_loopback_url(url) else None
