"""Every --help describes each option for its own command, in words, not Python types."""

from __future__ import annotations

from typing import Any

import pytest

from scripts.gen_docs import commands
from tests.support.cli import run_cli

COMMANDS = commands()


def _option(path: tuple[str, ...], name: str) -> Any:
    cmd = dict(COMMANDS)[path]
    return next(p for p in cmd.params if name in p.opts)


@pytest.mark.parametrize(("path", "cmd"), COMMANDS, ids=[" ".join(p) for p, _c in COMMANDS])
def test_every_option_has_help_and_no_python_type(path: tuple[str, ...], cmd: Any) -> None:
    missing = [p.name for p in cmd.params if not p.hidden and not (p.help or "").strip()]
    assert missing == []
    text = run_cli([*path, "--help"]).stdout
    assert "list[" not in text, f"{' '.join(path)} --help shows a Python type as a metavar"


def test_address_is_described_by_each_command() -> None:
    helps = {path: _option(path, "--address").help for path, cmd in COMMANDS
             if any("--address" in p.opts for p in cmd.params)}
    assert "push" in helps[("push",)]
    assert "push" not in helps[("explain",)]
    assert helps[("explain",)].startswith("With --verify")
    assert helps[("cache", "ls")].startswith("What to list")
    assert helps[("cache", "gc")].startswith("What to clean")
    assert helps[("cache", "purge")].startswith("What to clean")
    assert helps[("doctor",)].startswith("Also check")
    assert len(set(helps.values())) >= 5  # `run` names an rtenv agent, the others a cluster
