"""The handle of a built environment: what a create returns, on this node or over the wire."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class EnvHandle:
    """Where an environment lives on this node and what a process in it needs."""

    key: str
    holder: str
    working_dir: str | None
    py_modules: tuple[str, ...]
    venv: str | None
    env_vars: dict[str, str] = field(default_factory=dict)
    entries: tuple[str, ...] = ()
    built: tuple[str, ...] = ()  # entries this call built (empty on a cache hit)

    def to_dict(self) -> dict[str, Any]:
        # by hand, not dataclasses.asdict (a recursive deep copy): this runs on every cache hit
        return {"key": self.key, "holder": self.holder, "working_dir": self.working_dir,
                "py_modules": list(self.py_modules), "venv": self.venv,
                "env_vars": dict(self.env_vars), "entries": list(self.entries),
                "built": list(self.built)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> EnvHandle:
        return cls(key=data["key"], holder=data["holder"], working_dir=data["working_dir"],
                   py_modules=tuple(data["py_modules"]), venv=data["venv"],
                   env_vars=dict(data["env_vars"]), entries=tuple(data["entries"]),
                   built=tuple(data.get("built", ())))
