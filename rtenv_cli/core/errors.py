"""One exception hierarchy for everything a user may see, and one table that says what each class
means at each boundary: the CLI's exit code, the agent's HTTP status, and the stable `code` the
agent sends on the wire (the client decodes it back to the same class).

A class not in the table takes the row of its nearest ancestor that is.
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass
from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0
    FAILURE = 1  # findings, or an operation that was attempted and failed
    USAGE = 2  # bad flags, unreadable input, internal/tool errors
    INTERRUPTED = 130


EXIT_MEANINGS = {  # what each exit code tells a script (docs/exit-codes.md is made from it)
    ExitCode.OK: "success: nothing found, or the operation was done",
    ExitCode.FAILURE: "findings (an invalid file, a failed check), or an operation that was "
                      "attempted and failed",
    ExitCode.USAGE: "a usage error: bad flags or config, unreadable input; also an internal "
                    "error (a bug: rerun with RTENV_DEBUG=1)",
    ExitCode.INTERRUPTED: "interrupted (Ctrl-C)",
}


class RtenvError(Exception):
    """An error meant for the user: a message, where it happened, and the next step."""

    def __init__(self, message: str, *, hint: str | None = None, path: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.path = path

    @property
    def category(self) -> Category:
        return category_of(type(self))

    @property
    def exit_code(self) -> ExitCode:
        return self.category.exit_code

    @property
    def http_status(self) -> int:
        return self.category.http_status

    @property
    def code(self) -> str:
        return self.category.code

    def to_dict(self) -> dict[str, object]:
        return {"code": self.code, "message": self.message, "hint": self.hint,
                "path": self.path}


class UsageError(RtenvError):
    """Bad flags, missing input, unknown format, a malformed request: nothing could start."""


class ConfigError(UsageError):
    """A configuration file or value is wrong; the message names the file and field."""


class ValidationError(UsageError):
    """A value is well-formed but not acceptable (a runtime_env field Ray would refuse)."""


class PayloadTooLargeError(UsageError):
    """A request body over the agent's limit; refused before it is read."""


class OperationError(RtenvError):
    """The command ran and failed."""


class PackagingError(OperationError):
    """A package's content is wrong: unsafe archive, hash mismatch, bad manifest."""


class PackageConflictError(PackagingError):
    """A package name already holds other bytes: a name stands for its content, so the same
    name with other content is refused, never replaced under the nodes that cached it."""


class TransportError(OperationError):
    """A target (Ray dashboard, agent, shared filesystem) refused or could not be reached."""


class PackageTooLargeError(TransportError):
    pass


class AuthError(OperationError):
    """No credentials where the agent needs them."""


class ForbiddenError(AuthError):
    """Credentials given, but wrong."""


class NotFoundError(OperationError):
    """What the request names does not exist."""


class AgentError(OperationError):
    pass


class BuildError(AgentError):
    """An environment could not be built from what was asked (a requirement uv cannot
    resolve, a failing sdist build): the request's content, not the agent, is at fault."""


class UnsupportedError(OperationError):
    pass


class DiskFullError(OperationError):
    """The store's filesystem is out of space or quota."""


class FileSystemError(OperationError):
    """The file system refused a path: permission denied, read-only, a file where a directory
    must be, a name over the system's limit. The message names the path."""


class CacheError(OperationError):
    pass


class CacheBusyError(CacheError):
    pass


@dataclass(frozen=True)
class Category:
    code: str  # stable wire name: never rename one, clients decode it
    exit_code: ExitCode
    http_status: int


_FAIL, _USAGE = ExitCode.FAILURE, ExitCode.USAGE

TABLE: dict[type[RtenvError], Category] = {
    RtenvError: Category("error", _FAIL, 500),
    UsageError: Category("usage", _USAGE, 400),
    ConfigError: Category("config", _USAGE, 400),
    ValidationError: Category("invalid", _USAGE, 422),
    PayloadTooLargeError: Category("too-large", _USAGE, 413),
    OperationError: Category("failure", _FAIL, 500),
    PackagingError: Category("packaging", _FAIL, 422),
    PackageConflictError: Category("package-conflict", _FAIL, 409),
    TransportError: Category("transport", _FAIL, 502),
    PackageTooLargeError: Category("package-too-large", _FAIL, 413),
    AuthError: Category("unauthorized", _FAIL, 401),
    ForbiddenError: Category("forbidden", _FAIL, 403),
    NotFoundError: Category("not-found", _FAIL, 404),
    AgentError: Category("agent", _FAIL, 500),
    BuildError: Category("build-failed", _FAIL, 422),
    UnsupportedError: Category("unsupported", _FAIL, 501),
    DiskFullError: Category("disk-full", _FAIL, 507),
    FileSystemError: Category("filesystem", _FAIL, 500),
    CacheError: Category("cache", _FAIL, 500),
    CacheBusyError: Category("cache-busy", _FAIL, 409),
}
_BY_CODE: dict[str, type[RtenvError]] = {row.code: cls for cls, row in TABLE.items()}
assert len(_BY_CODE) == len(TABLE), "two classes share a wire code"  # noqa: S101 - import-time invariant of the table above


def category_of(cls: type[RtenvError]) -> Category:
    for klass in cls.__mro__:
        row = TABLE.get(klass)
        if row is not None:
            return row
    return TABLE[RtenvError]


def class_for_code(code: object, default: type[RtenvError]) -> type[RtenvError]:
    """The class a wire `code` stands for; `default` for a code this version does not know."""
    return _BY_CODE.get(code, default) if isinstance(code, str) else default


_DISK_FULL = (errno.ENOSPC, errno.EDQUOT)
# what each refusal of a path means, and the next step (the path is named in the message)
_PATH_ERRORS = {
    errno.ENOTDIR: ("a component of the path is a file, not a directory",
                    "check the path: a directory was expected (RTENV_HOME, --root, the file's "
                    "own name)"),
    errno.EACCES: ("permission denied",
                   "check the permissions of the path and its parents, or use another path"),
    errno.EPERM: ("operation not permitted",
                  "check the owner and permissions of the path, or use another path"),
    errno.EROFS: ("read-only file system",
                  "use a writable location (RTENV_HOME, --root), or remount it read-write"),
    errno.ENAMETOOLONG: ("file name too long",
                         "shorten it: a name is at most 255 bytes, a path 4096"),
}
_SHOWN_PATH = 200  # characters of a path quoted in a message


def _shown(path: object) -> str:
    text = os.fsdecode(path) if isinstance(path, str | bytes) else str(path)
    return text if len(text) <= _SHOWN_PATH else text[:_SHOWN_PATH] + "..."


def from_os_error(exc: OSError, what: str = "") -> RtenvError | None:
    """The user-facing error an OSError stands for, when it has one: a full disk, or a path
    the file system refuses (ENOTDIR, EACCES, EPERM, EROFS, ENAMETOOLONG: the path and what to
    do are named); None for an OSError that is a bug or an environment problem to report as
    such. The CLI's root group and the agent both map OS errors here."""
    if exc.errno in _DISK_FULL:
        where = f" ({exc.filename})" if exc.filename else ""
        return DiskFullError(f"{what or 'writing'}: no space left on the device{where}",
                             hint="free some space (rtenv cache gc), or set --max-size")
    meaning = _PATH_ERRORS.get(exc.errno) if exc.errno is not None else None
    if meaning is not None and exc.filename is not None:
        path = _shown(exc.filename)
        prefix = f"{what}: " if what else ""
        return FileSystemError(f"{prefix}{path}: {meaning[0]}", hint=meaning[1], path=path)
    return None
