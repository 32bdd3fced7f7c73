"""The per-user agent token: what makes a loopback agent this user's and nobody else's.

`rtenv agent` without `--token` (and without `--no-token`) requires a bearer token it keeps in
`RTENV_HOME/agent-token` (mode 0600, made on its first start). rtenv's own clients running as
the same user read that file when they talk to an agent on loopback and were given no token,
so `rtenv run --address`, `rtenv push --to` and `rtenv cache --agent` need no flag; another
local user cannot read the file, so cannot use the agent as its user.

The file's token goes only to a loopback address (127.0.0.0/8, ::1, localhost), and there only
to a socket this user owns (`FileBearer`, checked before each request): another local user who
holds the port while this user's agent is not there (the default 8790, say) gets an error
naming them, not the token. A token for any other agent (another machine's, another user's) is
given explicitly: `--token` or RTENV_AGENT_TOKEN, and goes where it is told.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import secrets
import stat
from pathlib import Path
from urllib.parse import urlsplit

from rtenv_cli.core.errors import TransportError, UsageError

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
    from rtenv_cli.core.paths import private_dir

    path = path or token_path()
    if (token := read_token(path)) is not None:
        return token
    try:
        private_dir(path.parent, "the token's directory")  # what others may write: not trusted
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


class FileBearer:
    """The token file's `Authorization` header for the agent at a loopback `url`, decided before
    each request (an agent may stop and another user take its port between two requests): sent
    while every socket listening there is this user's; withheld (`withheld` says why) when
    nothing listens or the system does not show owners; a TransportError naming the port's
    owner when another user listens there."""

    def __init__(self, url: str, token: str) -> None:
        parts = urlsplit(url)
        self.host = parts.hostname or "localhost"
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.token = token
        self._header = {"Authorization": f"Bearer {token}"}
        self.withheld: str | None = None

    def __call__(self) -> dict[str, str]:
        from rtenv_cli.core.transport.listeners import listener_uids

        uids = listener_uids(self.host, self.port)
        if not uids:
            self.withheld = ("nothing listened on the port when it was checked" if uids is not None
                             else "this system does not show who owns a listening port")
            return {}
        _refuse_others(uids, self.host, self.port, "this user's rtenv agent",
                       "this user's agent token",
                       hint="start your agent on a port of its own (`rtenv agent --port N`) and "
                       "give that URL; for an agent you were given a token for, pass it with "
                       "--token or RTENV_AGENT_TOKEN")
        self.withheld = None
        return self._header


def _refuse_others(uids: set[int], host: str, port: int, expected: str, token: str, *,
                   hint: str) -> None:
    """The TransportError for a token that was about to go to another user's listener."""
    if others := sorted(uids - {os.geteuid()}):
        from rtenv_cli.core.paths import owner_name

        raise TransportError(f"port {port} on {host} is held by another user, "
                             f"{owner_name(others[0])}, not by {expected}: {token} was not "
                             "sent to it", hint=hint)


def check_file_token_target(target: str, token: str, *, expected: str, hint: str) -> None:
    """For a token read from a file (not given): a TransportError when `target` (a URL or
    host:port) is a loopback address where another user listens (the port's owner, read once:
    see FileBearer for the per-request check an agent's client makes)."""
    url = target if "://" in target else f"tcp://{target}"
    if not is_loopback_url(url):
        return
    from rtenv_cli.core.transport.listeners import listener_uids

    parts = urlsplit(url)
    host, port = parts.hostname or "localhost", parts.port
    if port is not None:
        _refuse_others(listener_uids(host, port) or set(), host, port, expected, token,
                       hint=hint)


def file_bearer(url: str) -> FileBearer | None:
    """The user's token file's header source for an agent at `url` given no token: only for a
    loopback URL, and only when the file holds a token this user alone can read."""
    token = token_for(url)
    return FileBearer(url, token) if token else None
