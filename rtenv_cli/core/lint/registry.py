"""Every rule rtenv knows: a stable code, a name, a default severity and ruff-style docs.

The docs live in `rules_docs.py` (data, rows of `rule.Rule`); this module is the lookup API
used by the engine, the `rtenv rules` command and the tests that keep every code documented.
"""

from __future__ import annotations

from rtenv_cli.core.errors import UsageError
from rtenv_cli.core.lint.diagnostic import Severity
from rtenv_cli.core.lint.rule import Rule

__all__ = ["Rule", "all_rules", "get_rule", "severity_of"]


def all_rules() -> tuple[Rule, ...]:
    from rtenv_cli.core.lint.rules_docs import RULES

    return RULES


def get_rule(code: str) -> Rule:
    wanted = code.strip().upper()
    for rule in all_rules():
        if rule.code == wanted or rule.name == code.strip().lower():
            return rule
    raise UsageError(f"unknown rule {code!r}", hint="list the rules with `rtenv rules`")


def severity_of(code: str) -> Severity:
    return get_rule(code).severity
