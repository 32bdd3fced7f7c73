"""The doctor's results: one `Check` per fact, each ok, warn or fail, with the fix."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Status(str, Enum):
    OK = "ok"
    WARN = "warn"  # works, but something is off or will not work for some commands
    FAIL = "fail"  # something a command needs is missing


@dataclass(frozen=True)
class Check:
    name: str
    status: Status
    detail: str
    fix: str | None = None

    def to_dict(self) -> dict[str, str | None]:
        return {"name": self.name, "status": self.status.value, "detail": self.detail,
                "fix": self.fix}


def ok(name: str, detail: str) -> Check:
    return Check(name, Status.OK, detail)


def warn(name: str, detail: str, fix: str | None) -> Check:
    return Check(name, Status.WARN, detail, fix)


def fail(name: str, detail: str, fix: str | None) -> Check:
    return Check(name, Status.FAIL, detail, fix)


@dataclass(frozen=True)
class DoctorReport:
    checks: tuple[Check, ...]

    def count(self, status: Status) -> int:
        return sum(1 for c in self.checks if c.status is status)

    @property
    def exit_code(self) -> int:
        """1 when something a command needs is missing (a failed check), else 0."""
        return 1 if self.count(Status.FAIL) else 0

    def to_dict(self) -> dict[str, object]:
        return {"checks": [c.to_dict() for c in self.checks]}
