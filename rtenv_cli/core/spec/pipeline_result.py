"""What Ray's pipeline replay produces for one runtime_env (`PipelineResult`) and which entry
point it follows (`Api`); shared by the pipeline, its packaging stage and lint's rules."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rtenv_cli.core.spec import normalize as n
from rtenv_cli.core.spec.construct import Api

__all__ = ["Api", "PipelineResult"]


@dataclass
class PipelineResult:
    errors: list[n.RuntimeEnvValueError] = field(default_factory=list)
    normalized: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)
    packages: list[tuple[tuple[Any, ...], Path, str]] = field(default_factory=list)

    @property
    def valid(self) -> bool:
        return not self.errors
