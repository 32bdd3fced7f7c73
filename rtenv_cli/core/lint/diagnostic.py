"""Findings are data: one `Diagnostic` per problem, with its rule code and source position."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any


class Severity(str, Enum):
    ERROR = "error"
    WARNING = "warning"
    INFO = "info"

    @property
    def rank(self) -> int:
        return {"error": 2, "warning": 1, "info": 0}[self.value]


@dataclass(frozen=True)
class Diagnostic:
    code: str
    severity: Severity
    message: str
    line: int | None = None
    column: int | None = None
    end_line: int | None = None
    end_column: int | None = None
    hint: str | None = None
    json_path: tuple[Any, ...] = ()
    ray_error: bool = False  # Ray itself rejects this (it decides the verdict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "code": self.code,
            "severity": self.severity.value,
            "message": self.message,
            "line": self.line,
            "column": self.column,
            "end_line": self.end_line,
            "end_column": self.end_column,
            "hint": self.hint,
            "json_path": [p if isinstance(p, (str, int)) else repr(p) for p in self.json_path],
            "ray_error": self.ray_error,
        }
