"""The root command: version, help, exit codes."""

from __future__ import annotations

from rtenv_cli import __version__
from tests.support.cli import run_cli, run_process


def test_version() -> None:
    result = run_cli(["--version"])
    assert result.exit_code == 0
    assert result.stdout.strip() == f"rtenv {__version__}"


def test_help_lists_example() -> None:
    result = run_cli(["--help"])
    assert result.exit_code == 0
    assert "Example:" in result.stdout


def test_unknown_command_is_usage_error() -> None:
    result = run_cli(["no-such-command"])
    assert result.exit_code == 2
    assert "No such command" in result.stderr


def test_version_as_process() -> None:
    result = run_process(["--version"])
    assert result.exit_code == 0, result.stderr
    assert __version__ in result.stdout
