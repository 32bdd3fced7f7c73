"""The static command table behind the lazy root group matches the real commands."""

from __future__ import annotations

import subprocess
import sys

import pytest

from rtenv_cli.cli.commands import COMMANDS, build
from tests.support.cli import run_cli


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_table_help_is_the_commands_own(name: str) -> None:
    command = build(name)
    assert command.name == name
    assert COMMANDS[name][1] == command.get_short_help_str(1000)


def test_root_help_lists_every_command_in_table_order() -> None:
    result = run_cli(["--help"])
    assert result.exit_code == 0
    listed = [line.split()[0] for line in result.stdout.split("Commands:", 1)[1].splitlines()
              if line.strip()]
    assert listed == list(COMMANDS)


def test_running_one_command_imports_no_other_command_module() -> None:
    code = (
        "import sys\nfrom rtenv_cli.cli.main import main\n"
        "main(['rules'])\n"
        "print(sorted(m for m in sys.modules if m.startswith('rtenv_cli.cli.')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip().splitlines()[-1]
    loaded = eval(out)  # noqa: S307 - a list literal printed by the child above
    others = {f"rtenv_cli.cli.{module}" for name, (module, _) in COMMANDS.items()
              if name != "rules"}
    assert "rtenv_cli.cli.rules" in loaded
    assert not others & set(loaded)


def test_typo_suggests_the_command() -> None:
    result = run_cli(["valdate"])
    assert result.exit_code == 2
    assert "Did you mean 'validate'" in result.stderr
