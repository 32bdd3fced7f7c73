"""One exception hierarchy for everything a user may see; each class knows its exit code."""

from __future__ import annotations

from enum import IntEnum
from typing import ClassVar


class ExitCode(IntEnum):
    OK = 0
    FAILURE = 1  # findings, or an operation that was attempted and failed
    USAGE = 2  # bad flags, unreadable input, internal/tool errors
    INTERRUPTED = 130


class RtenvError(Exception):
    """An error meant for the user: a message, where it happened, and the next step."""

    exit_code: ClassVar[ExitCode] = ExitCode.FAILURE
    kind: ClassVar[str] = "error"

    def __init__(self, message: str, *, hint: str | None = None, path: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.path = path

    def to_dict(self) -> dict[str, object]:
        return {"kind": self.kind, "message": self.message, "hint": self.hint, "path": self.path}


class UsageError(RtenvError):
    """Bad flags, missing input, unknown format: the command could not start."""

    exit_code = ExitCode.USAGE
    kind = "usage"


class ConfigError(UsageError):
    """A configuration file or value is wrong; the message names the file and field."""

    kind = "config"


class OperationError(RtenvError):
    """The command ran and failed."""

    kind = "failure"


class PackagingError(OperationError):
    kind = "packaging"


class TransportError(OperationError):
    """A target (Ray dashboard, agent, shared filesystem) refused or could not be reached."""

    kind = "transport"


class PackageTooLargeError(TransportError):
    kind = "too-large"


class AgentError(OperationError):
    kind = "agent"


class UnsupportedError(OperationError):
    kind = "unsupported"


class CacheError(OperationError):
    kind = "cache"


class CacheBusyError(CacheError):
    kind = "cache-busy"


class DiskFullError(OperationError):
    """No space left (ENOSPC, quota) while storing or building: not the input's fault."""

    kind = "disk-full"
