"""`Rule`: one rule's code, name, default severity and ruff-style docs (the rule table's row)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rtenv_cli.core.lint.diagnostic import Severity


@dataclass(frozen=True)
class Rule:
    code: str
    name: str
    severity: Severity
    summary: str
    what: str  # What it does
    why: str  # Why is this bad?
    example: str  # a bad runtime_env (YAML)
    fixed: str  # Use instead
    ray: bool = False  # Ray itself rejects what this rule reports (it decides the verdict)

    def to_dict(self) -> dict[str, Any]:
        return {"code": self.code, "name": self.name, "severity": self.severity.value,
                "summary": self.summary, "ray_rejects": self.ray, "what_it_does": self.what,
                "why_is_this_bad": self.why, "example": self.example, "use_instead": self.fixed}

    def docs(self) -> str:
        """The rule's documentation as Markdown-ish text (what `rtenv rules CODE` prints)."""
        return (f"# {self.code} {self.name}\n\nDefault severity: {self.severity.value}"
                f"{' (Ray rejects it: decides the verdict)' if self.ray else ''}\n\n"
                f"## What it does\n{self.what}\n\n## Why is this bad?\n{self.why}\n\n"
                f"## Example\n```yaml\n{self.example.rstrip()}\n```\n\n"
                f"Use instead:\n```yaml\n{self.fixed.rstrip()}\n```\n")
