"""The root command: version, help, exit codes."""

from __future__ import annotations

from pathlib import Path

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


def test_closed_pipe_is_not_an_internal_error(tmp_path: Path) -> None:
    import subprocess
    import sys

    for i in range(50):
        (tmp_path / f"e{i}_runtime_env.yaml").write_text("pypi: [x]\nenv_vars: {A: 1}\n")
    proc = subprocess.Popen([sys.executable, "-m", "rtenv_cli", "validate", str(tmp_path)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None
    assert proc.stderr is not None
    proc.stdout.close()  # the reader is gone before rtenv writes: `rtenv validate DIR | true`
    stderr = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 1
    assert "internal error" not in stderr
    assert "Traceback" not in stderr
